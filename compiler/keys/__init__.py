"""The declaration of every settings key (`sections/`, `declare.py`, `settings.py`) and what
is generated from it (the JSON Schemas, the schema index)."""
