"""The declaration of every settings key, one dataclass per section (see `compiler/keys/settings.py`)."""
