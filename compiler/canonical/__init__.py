"""Stage 2, normalise: what the person wrote -> canonical settings (every key, every
default, forgiving spellings, value checks)."""
