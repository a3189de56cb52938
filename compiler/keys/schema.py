"""The settings schema and the indexes the compiler needs from it.

The declaration of every key is `compiler/keys/settings.py` (its section dataclasses); the JSON
Schema is generated from it (`compiler/keys/schema_gen.py`, committed as
`schemas/settings.schema.json`). This module derives, in memory:

* the canonical key paths (``section.key``) with their JSON-Schema property,
* the alias table (flat flag names from the seeds -> canonical path),
* defaults, and "did you mean" suggestions for misspelt keys,
* the former keys a key replaced (`SchemaIndex.replaced`), so that an old settings file is told
  what to write instead,
* accelerate's names for keys (`accelerate_names`, `accelerate_name`), shared by emit and
  the importer.

A key's default, help, choices, aliases, wizard step and coercion come from its typed
declaration (`KeyInfo.type`, `KeyInfo.setting`); its JSON-Schema property (`KeyInfo.prop`)
is what the validator checks values against.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

from .coercion import coerce_declared
from .declare import Setting, declared
from .schema_gen import SCHEMA_FILE, settings_schema
from .settings import Settings

__all__ = ["SCHEMA_FILE", "KeyInfo", "SchemaIndex", "accelerate_name", "accelerate_names", "index", "index_of", "load_schema",
           "written_accelerate_names"]


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
    """The key's JSON Schema property (what the validator checks)."""
    setting: Setting
    """The key's declaration (default, spellings, accelerate names, ...)."""
    type: Any
    """The key's declared Python type (its dataclass field's annotation)."""
    step: str
    """The wizard step that shows the key (its own ``step=``, else its section's)."""

    @property
    def default(self) -> Any:
        return self.setting.default

    @property
    def description(self) -> str:
        return self.setting.help

    @property
    def enum(self) -> list[Any] | None:
        # open_choices: the choices offered (wizard, `tuner schema`) where other values are valid too
        choices = self.setting.choices or self.setting.open_choices
        return list(choices) if choices else None

    @property
    def aliases(self) -> list[str]:
        return list(self.setting.aliases)

    def coerce(self, value: Any) -> Any:
        """A value written for this key -> its canonical value (declared spellings, then the
        conversions its type allows); what cannot be converted is returned as written."""
        return coerce_declared(self.type, self.setting, value)


@dataclass(frozen=True)
class SchemaIndex:
    sections: dict[str, dict[str, Any]]
    keys: dict[str, KeyInfo]
    aliases: dict[str, str]
    schema: dict[str, Any]
    """The whole JSON Schema the keys' properties come from (what normalise validates with)."""
    replaced: dict[str, tuple[str, dict[Any, Any]]] = field(default_factory=dict)
    """A former key as written (``model.load_in_4bit``, or its flat ``load_in_4bit``) -> (the key
    that replaced it, {its value: that key's value}), from the keys' ``replaces=``."""

    def defaults(self) -> dict[str, dict[str, Any]]:
        """A fresh nested dict of every declared default (deep-copied)."""
        out: dict[str, dict[str, Any]] = {s: {} for s in self.sections}
        for info in self.keys.values():
            out[info.section][info.name] = copy.deepcopy(info.default)
        return out

    def suggest(self, word: str, section: str | None = None) -> list[str]:
        """Close canonical paths or aliases for a misspelt key."""
        if section is not None:
            pool = [k.name for k in self.keys.values() if k.section == section]
            names = difflib.get_close_matches(word, pool, n=3, cutoff=0.6)
            return [f"{section}.{n}" for n in names]
        pool = list(self.aliases) + list(self.keys) + list(self.sections)
        return difflib.get_close_matches(word, pool, n=3, cutoff=0.6)


def index() -> SchemaIndex:
    """The index of tuner's declaration (`Settings`)."""
    return index_of(Settings)


@cache
def index_of(root: type) -> SchemaIndex:
    """The index of the settings declared by `root` (tuner's `Settings`, or a test's own)."""
    schema = load_schema() if root is Settings else settings_schema(root)
    sections = schema["properties"]
    keys: dict[str, KeyInfo] = {}
    aliases: dict[str, str] = {}
    replaced: dict[str, tuple[str, dict[Any, Any]]] = {}
    for key in declared(root):
        keys[key.path] = KeyInfo(key.path, key.section, key.name, sections[key.section]["properties"][key.name],
                                 key.setting, key.type, key.step)
        for alias in key.setting.aliases:
            aliases[alias] = key.path
        for name, values in (key.setting.replaces or {}).items():
            replaced[f"{key.section}.{name}"] = replaced[name] = (key.path, values)
    return SchemaIndex(sections, keys, aliases, schema, replaced)


@cache
def accelerate_names(block: str = "", root: type = Settings) -> dict[str, str]:
    """accelerate's key names in one block of its config (``""`` for the top level,
    ``"fsdp_config"``, ``"deepspeed_config"``, ``"parallelism_config"``) -> canonical key,
    from the keys' ``accelerate=`` declarations. The importer reads these names; emit writes
    the first of each key's names (`written_accelerate_names`)."""
    out: dict[str, str] = {}
    for path, info in index_of(root).keys.items():
        for name in info.setting.accelerate:
            where, _, key = name.rpartition(".")
            if where == block:
                out[key] = path
    return out


@cache
def written_accelerate_names(block: str = "", root: type = Settings) -> dict[str, str]:
    """The accelerate names emit writes in `block` (each key's first ``accelerate=`` name)
    -> canonical key."""
    out: dict[str, str] = {}
    for path, info in index_of(root).keys.items():
        if info.setting.accelerate:
            where, _, key = info.setting.accelerate[0].rpartition(".")
            if where == block:
                out[key] = path
    return out


@cache
def accelerate_name(path: str, root: type = Settings) -> str:
    """accelerate's name for canonical key `path` inside its block, as emit writes it
    (``"fsdp.version"`` -> ``"fsdp_version"``): the first of its ``accelerate=`` names."""
    names = index_of(root).keys[path].setting.accelerate
    if not names:
        raise LookupError(f"{path} declares no accelerate name (accelerate= in compiler/keys/sections/)")
    return names[0].rpartition(".")[2]
