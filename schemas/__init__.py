"""The settings JSON Schema, shipped as package data (read with importlib.resources)."""
