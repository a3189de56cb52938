"""The settings schema: loading it and the indexes the compiler needs from it.

`schemas/settings.schema.json` is the one declaration of every key. This module reads it
(as package data, so an installed tuner finds it) and derives:

* the canonical key paths (``section.key``) with their JSON-Schema property,
* the alias table (flat flag names from the seeds -> canonical path),
* defaults, and "did you mean" suggestions for misspelt keys.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

SCHEMA_FILE = "settings.schema.json"


@lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    text = resources.files("tuner.schemas").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


@dataclass(frozen=True)
class KeyInfo:
    path: str
    section: str
    name: str
    prop: dict[str, Any]

    @property
    def default(self) -> Any:
        return self.prop.get("default")

    @property
    def description(self) -> str:
        return self.prop.get("description", "")

    @property
    def enum(self) -> list[Any] | None:
        # x-choices: the choices offered (wizard, `tuner schema`) where other values are valid too
        return self.prop.get("enum") or self.prop.get("x-choices")

    @property
    def aliases(self) -> list[str]:
        return self.prop.get("x-aliases", [])


@dataclass(frozen=True)
class SchemaIndex:
    sections: dict[str, dict[str, Any]]
    keys: dict[str, KeyInfo]
    aliases: dict[str, str]

    def defaults(self) -> dict[str, dict[str, Any]]:
        """A fresh nested dict of every default (deep-copied via JSON)."""
        out: dict[str, dict[str, Any]] = {s: {} for s in self.sections}
        for info in self.keys.values():
            out[info.section][info.name] = json.loads(json.dumps(info.default))
        return out

    def suggest(self, word: str, section: str | None = None) -> list[str]:
        """Close canonical paths or aliases for a misspelt key."""
        if section is not None:
            pool = [k.name for k in self.keys.values() if k.section == section]
            names = difflib.get_close_matches(word, pool, n=3, cutoff=0.6)
            return [f"{section}.{n}" for n in names]
        pool = list(self.aliases) + list(self.keys) + list(self.sections)
        return difflib.get_close_matches(word, pool, n=3, cutoff=0.6)


@lru_cache(maxsize=1)
def index() -> SchemaIndex:
    schema = load_schema()
    sections = schema["properties"]
    keys: dict[str, KeyInfo] = {}
    aliases: dict[str, str] = {}
    for section, sec in sections.items():
        for name, prop in sec["properties"].items():
            path = f"{section}.{name}"
            keys[path] = KeyInfo(path, section, name, prop)
            for alias in prop.get("x-aliases", []):
                aliases[alias] = path
    return SchemaIndex(sections, keys, aliases)
