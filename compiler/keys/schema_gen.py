"""JSON Schemas generated from the declaration (`compiler/keys/settings.py`).

* `settings_schema()`: the canonical schema of resolved settings, committed as
  ``schemas/settings.schema.json``; the compiler validates with it (in memory).
* `input_schema()`: what an editor (Taplo / Even Better TOML) checks a settings.toml with,
  committed as ``schemas/settings.input.schema.json``. It accepts what `tuner compile`
  accepts: sections, the seeds' flat aliases at top level and inside their section, and the
  forgiving spellings (any case, blanks around, "yes" for true, "v2", "A,B" for a list);
  unknown keys are still refused.

`tuner schema --write` writes both files; `tests/compiler/test_schema_files.py` fails when a
committed file differs from what this module generates.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .declare import Declared, declared, json_type, sections
from .settings import Settings

SCHEMA_FILE = "settings.schema.json"
INPUT_SCHEMA_FILE = "settings.input.schema.json"
REGENERATE = "tuner schema --write"

_HEADER = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://tuner.dev/schemas/settings.schema.json",
    "title": "tuner settings",
    "description": "Every key tuner's settings.toml may hold. Canonical keys are sectioned; each key's x-aliases "
                   "lists the flat flag names (SimpleTuner / vembed-factory spellings) accepted for it.",
    "type": "object",
    "additionalProperties": False,
}


def key_property(key: Declared) -> dict[str, Any]:
    """One key's JSON Schema property (canonical values only)."""
    s = key.setting
    names, item = json_type(key.type)
    prop: dict[str, Any] = {"type": names[0] if len(names) == 1 else names, "default": s.default,
                            "description": s.help}
    if s.choices is not None:
        prop["enum"] = list(s.choices)
    if s.open_choices is not None:
        prop["x-choices"] = list(s.open_choices)
    if s.aliases:
        prop["x-aliases"] = list(s.aliases)
    if item is not None:
        prop["items"] = {"type": json_type(item)[0][0]}
        if s.item_minimum is not None:
            prop["items"]["minimum"] = s.item_minimum
    for fact, word in (("minimum", "minimum"), ("exclusive_minimum", "exclusiveMinimum"), ("maximum", "maximum"),
                       ("pattern", "pattern")):
        if getattr(s, fact) is not None:
            prop[word] = getattr(s, fact)
    return prop


def settings_schema(root: type = Settings) -> dict[str, Any]:
    """The canonical schema of the settings declared by `root` (tuner's `Settings`; a test
    may declare its own)."""
    schema = dict(_HEADER, properties={})
    by_section: dict[str, dict[str, Any]] = {}
    for name, cls in sections(root).items():
        by_section[name] = {"type": "object", "title": getattr(cls, "title", name),
                            "description": " ".join((cls.__doc__ or "").split()),
                            "additionalProperties": False, "properties": {}, "default": {}}
    for key in declared(root):
        by_section[key.section]["properties"][key.name] = key_property(key)
    schema["properties"] = by_section
    return schema


# --- the editor input schema -------------------------------------------------------------

_BLANK = r"\s*"


def _any_case(word: str) -> str:
    """An ECMA-262 regex fragment matching `word` in any case (no (?i) there)."""
    out = []
    for ch in word:
        if ch.lower() != ch.upper():
            out.append(f"[{ch.lower()}{ch.upper()}]")
        else:
            out.append(re.escape(ch))
    return "".join(out)


def _words_pattern(words: list[str]) -> str:
    return f"^{_BLANK}(?:{'|'.join(_any_case(w) for w in sorted(set(words)))}){_BLANK}$"


_TRUE_FALSE = ["true", "yes", "on", "1", "false", "no", "off", "0"]
_INTEGER_TEXT = r"^\s*[+-]?\d{1,19}\s*$"
_NUMBER_TEXT = r"^\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*$"


def _input_value(key: Declared, prop: dict[str, Any]) -> dict[str, Any]:
    """What may be written for one key: the canonical value, or a spelling that normalise
    turns into one (the key's `spellings` table, then `coercion.coerce_typed`)."""
    s = key.setting
    names, _ = json_type(key.type)
    canonical = {k: v for k, v in prop.items() if k not in ("default", "description", "x-aliases", "x-choices")}
    free_text = "string" in names and "enum" not in prop and "pattern" not in prop
    alts: list[dict[str, Any]] = [canonical]
    words = [str(c) for c in prop.get("enum", []) if c is not None] + list(getattr(s.spellings, "table", {}))
    if words and not free_text:
        alts.append({"type": "string", "pattern": _words_pattern(words)})
    if any(v is False for v in getattr(s.spellings, "off", ())):  # false means the key's "off" value
        alts.append({"const": False})
    if key.path == "hardware.gpu_ids":
        alts.append({"type": ["array", "integer"]})  # accelerate's forms, joined to "0,1"
    if "boolean" in names:
        alts.append({"type": "string", "pattern": _words_pattern(_TRUE_FALSE)})
    if "enum" in prop:
        pass  # the choices' own words (above) are the numbers written as text
    elif "integer" in names:
        alts.append({"type": "string", "pattern": _INTEGER_TEXT})
    elif "number" in names:
        alts.append({"type": "string", "pattern": _NUMBER_TEXT})
    if "array" in names:
        alts.append({"type": "string"})  # "A, B" is a list of two
    # description and default stay outside anyOf: editors show them on hover and completion
    head = {"description": s.help, **({"default": s.default} if s.default is not None else {})}
    if len(alts) == 1:
        return {**head, **canonical}
    return {**head, "anyOf": alts}


def input_schema(root: type = Settings) -> dict[str, Any]:
    canonical = settings_schema(root)
    out = dict(canonical)
    out["$id"] = "https://tuner.dev/schemas/settings.input.schema.json"
    out["title"] = "tuner settings (as written)"
    out["description"] = ("What `tuner compile` accepts in a settings.toml: sectioned keys, the seeds' flat aliases "
                          "(at top level or inside their section) and forgiving spellings. Generated from the "
                          "declaration; the canonical schema is settings.schema.json.")
    props: dict[str, Any] = {}
    top_aliases: dict[str, Any] = {}
    for name, sec in canonical["properties"].items():
        props[name] = {k: v for k, v in sec.items() if k != "default"}
        props[name]["properties"] = {}
    for key in declared(root):
        value = _input_value(key, canonical["properties"][key.section]["properties"][key.name])
        props[key.section]["properties"][key.name] = value
        for alias in key.setting.aliases:
            ref = {"$ref": f"#/properties/{key.section}/properties/{key.name}"}
            if alias != key.name:
                props[key.section]["properties"].setdefault(alias, ref)
            if alias not in props:
                top_aliases.setdefault(alias, ref)
    out["properties"] = {**props, **dict(sorted(top_aliases.items()))}
    return out


def render(schema: dict[str, Any]) -> str:
    """The committed file's exact text."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def files() -> dict[str, str]:
    """File name (under schemas/) -> its generated text."""
    return {SCHEMA_FILE: render(settings_schema()), INPUT_SCHEMA_FILE: render(input_schema())}
