"""The settings schema and the indexes the compiler needs from it.

The declaration of every key is `compiler/settings.py` (its section dataclasses); the JSON
Schema is generated from it (`compiler/schema_gen.py`, committed as
`schemas/settings.schema.json`). This module derives, in memory:

* the canonical key paths (``section.key``) with their JSON-Schema property,
* the alias table (flat flag names from the seeds -> canonical path),
* defaults, and "did you mean" suggestions for misspelt keys,
* accelerate's names for keys (`accelerate_names`), shared by emit and the importer.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from .declare import Setting, declared
from .schema_gen import SCHEMA_FILE, settings_schema
from .settings import Settings

__all__ = ["SCHEMA_FILE", "KeyInfo", "SchemaIndex", "accelerate_names", "index", "load_schema"]


@lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    """The canonical JSON Schema, generated from the declaration (what the committed
    schemas/settings.schema.json holds). Do not modify the returned dict."""
    return settings_schema()


@dataclass(frozen=True)
class KeyInfo:
    path: str
    section: str
    name: str
    prop: dict[str, Any]
    """The key's JSON Schema property."""
    setting: Setting
    """The key's declaration (spellings, accelerate names, wizard step, ...)."""

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
    sections = load_schema()["properties"]
    keys: dict[str, KeyInfo] = {}
    aliases: dict[str, str] = {}
    for key in declared(Settings):
        keys[key.path] = KeyInfo(key.path, key.section, key.name, sections[key.section]["properties"][key.name],
                                 key.setting)
        for alias in key.setting.aliases:
            aliases[alias] = key.path
    return SchemaIndex(sections, keys, aliases)


@cache
def accelerate_names(block: str = "") -> dict[str, str]:
    """accelerate's key names in one block of its config (``""`` for the top level,
    ``"fsdp_config"``, ``"deepspeed_config"``, ``"parallelism_config"``) -> canonical key,
    from the keys' ``accelerate=`` declarations. emit writes these names; the importer
    reads them back through this same table."""
    out: dict[str, str] = {}
    for path, info in index().keys.items():
        for name in info.setting.accelerate:
            where, _, key = name.rpartition(".")
            if where == block:
                out[key] = path
    return out
