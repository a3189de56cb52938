"""Normalisation: what the person wrote -> canonical settings (every key, every default).

Three inputs are accepted and mapped onto one canonical, sectioned layout:

* the sectioned layout itself (``[fsdp] version = 2``),
* the seeds' flat flag names as aliases (``fsdp_version = 2``), at top level or inside a
  section, 1:1 with the schema's ``x-aliases``,
* command-line overrides (``--set fsdp_version=2`` or the seed's ``--fsdp_version=2``).

Forgiving spellings (``"v2"``, ``SHARDED_STATE_DICT``, ``"A,B"`` for a list, ...) become the
canonical value and each change is reported as a note: a key's own spellings are declared
with it (``spellings=`` in `compiler/keys/sections/`), the type-driven ones follow its declared type
(`compiler/keys/coercion.py`). Unknown keys are errors with a
"did you mean"; a former key that another replaced (``replaces=`` in that key's declaration:
``model.load_in_4bit``) says what to write instead. Finally the values are checked
(`value_checks.py`: numbers, text patterns, what the artefacts cannot hold) and the schema
validates types and enums; a key that fails falls back to its default so that the
cross-field rules can still run and report everything at once.
"""

from __future__ import annotations

import copy
import json
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .. import parse
from ..diagnostics import Diagnostics
from ..keys import paths as K
from ..keys.schema import SchemaIndex, index, index_of
from ..keys.settings import Settings
from ..keys.spellings import FAMILY_ALIASES
from . import value_checks
from .conforms import conforms

# --- forgiving spellings: each key's own are declared with it (compiler/keys/spellings.py) ---

def coerce(path: str, value: Any) -> Any:
    """A value written for canonical key `path` -> its canonical value: the key's declared
    spellings, then the type-driven conversions. What cannot be converted is returned as
    written (validation reports it). The wizard's fields use this too (one coercer).
    Both kinds come from the key's typed declaration (`compiler/keys/coercion.py`)."""
    return index().keys[path].coerce(value)


# --- the result ----------------------------------------------------------------------


@dataclass(frozen=True)
class Normalised:
    """The normalise stage's result, read-only: later stages read it, none changes it."""

    settings: Mapping[str, Mapping[str, Any]]
    """Section -> key -> canonical value (every key; defaults where nothing was written)."""
    explicit: frozenset[str] = frozenset()
    """Canonical paths the person set (in the file or on the command line)."""
    origin: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Canonical path -> the path as written (an alias, or a key inside a section)."""
    invalid: frozenset[str] = frozenset()
    """Canonical paths whose value failed validation and fell back to the default."""

    def value(self, path: str) -> Any:
        """The canonical value of dotted key `path` (``fsdp.version``)."""
        section, name = path.split(".", 1)
        return self.settings[section][name]


@dataclass
class _Result:
    """What `normalise` fills in before it freezes it into `Normalised`."""

    settings: dict[str, dict[str, Any]]
    explicit: set[str]
    origin: dict[str, str]
    invalid: set[str] = field(default_factory=set)

    def frozen(self) -> Normalised:
        return Normalised(MappingProxyType({k: MappingProxyType(v) for k, v in self.settings.items()}),
                          frozenset(self.explicit), MappingProxyType(dict(self.origin)), frozenset(self.invalid))


def parse_override(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` (or ``--KEY=VALUE`` / bare ``--KEY``) -> (KEY, VALUE).

    VALUE is read as a TOML value when it is one (``2``, ``true``, ``["A"]``,
    ``{stage = 3}``), otherwise as a plain string; a bare key means ``true``.
    Raises ValueError for an empty key.
    """
    text = text.strip()
    if text.startswith("--"):
        text = text[2:]
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not key:
        raise ValueError(f"override {text!r} has no key; write KEY=VALUE")
    if not sep:
        return key, True
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return key, raw
    except RecursionError:
        raise ValueError(f"override {key}: value nested more than {parse.MAX_DEPTH} levels deep") from None
    problem = parse.nesting_problem(value)
    if problem:
        raise ValueError(f"override {key}: value {problem}")
    return key, value


def _describe(value: Any) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)  # an emoji shows as itself, not \ud83d\ude00
    return text if len(text) <= 60 else text[:57] + "..."


#: Unknown keys reported one by one, each with a "did you mean" (difflib, ~1 ms each); beyond
#: this a generated file's thousands of them are counted in one line, so time stays linear
#: and small in the input's size.
MAX_UNKNOWN_REPORTED = 50


class _Builder:
    def __init__(self, idx: SchemaIndex, diags: Diagnostics):
        self.idx = idx
        self.diags = diags
        self.values: dict[str, Any] = {}
        self.origin: dict[str, str] = {}
        self.unknown_count = 0
        self.unreported: list[str] = []

    def report_unreported(self) -> None:
        if self.unreported:
            first = ", ".join(repr(p) for p in self.unreported[:5])
            self.diags.error("", f"{len(self.unreported):,} more unknown keys ({first}, ...)",
                             "remove them; `tuner schema` lists every key")

    def put(self, canonical: str, written: str, value: Any, source: str) -> None:
        if canonical in self.values and source == "file":
            if self.values[canonical] != value:
                self.diags.error(
                    written,
                    f"{canonical} is set twice with different values "
                    f"(as {self.origin[canonical]} = {_describe(self.values[canonical])} and as {written} = {_describe(value)})",
                    "keep one of the two spellings",
                )
            return
        self.values[canonical] = value
        self.origin[canonical] = written

    def take_file(self, data: dict[str, Any]) -> None:
        idx = self.idx
        for key in data:
            value = data[key]
            if key in idx.sections:
                if not isinstance(value, dict):
                    self.diags.error(key, f"[{key}] must be a table of settings, not {type(value).__name__}",
                                     f"write it as a [{key}] section")
                    continue
                for sub, subvalue in value.items():
                    path = f"{key}.{sub}"
                    if path in idx.keys:
                        self.put(path, path, subvalue, "file")
                    elif sub in idx.aliases and idx.aliases[sub].startswith(key + "."):
                        self.put(idx.aliases[sub], path, subvalue, "file")
                    else:
                        self.unknown(path, sub, subvalue, section=key)
            elif key in idx.aliases:
                self.put(idx.aliases[key], key, value, "file")
            else:
                self.unknown(key, key, value)

    def replaced(self, path: str, value: Any) -> tuple[str, str] | None:
        """For a former key (`SchemaIndex.replaced`): (what replaced it, what to write instead)."""
        if path not in self.idx.replaced:
            return None
        new, values = self.idx.replaced[path]
        default = self.idx.keys[new].default
        meant = [v for old, v in values.items() if type(old) is type(value) and old == value]
        if not meant:
            choices = " or ".join(f"{new} = {_describe(v)} (for {_describe(old)})" for old, v in values.items())
            return new, f"write {choices} instead"
        if meant[0] == default:
            return new, f"remove it: {new} = {_describe(meant[0])}, the default, is what it meant"
        return new, f"write {new} = {_describe(meant[0])} instead"

    def unknown(self, path: str, word: str, value: Any, section: str | None = None) -> None:
        self.unknown_count += 1
        if self.unknown_count > MAX_UNKNOWN_REPORTED:  # a generated file: count the rest, suggest nothing
            self.unreported.append(path)
            return
        where = f"in [{section}]" if section else "at top level"
        if former := self.replaced(path, value):
            self.diags.error(path, f"unknown key {word!r} {where}: {former[0]} replaced it", former[1])
            return
        hints = self.idx.suggest(word, section) or self.idx.suggest(word)
        fix = f"did you mean {' or '.join(hints)}?" if hints else "remove it; `tuner schema` lists every key"
        self.diags.error(path, f"unknown key {word!r} {where}", fix)

    def take_override(self, text: str) -> None:
        try:
            key, value = parse_override(text)
        except ValueError as exc:
            self.diags.error("", str(exc))
            return
        if key in self.idx.keys:
            canonical = key
        elif key in self.idx.aliases:
            canonical = self.idx.aliases[key]
        elif former := self.replaced(key, value):
            self.diags.error(key, f"unknown key {key!r} in command-line override: {former[0]} replaced it", former[1])
            return
        else:
            hints = self.idx.suggest(key)
            fix = f"did you mean {' or '.join(hints)}?" if hints else "`tuner schema` lists every key"
            self.diags.error(key, f"unknown key {key!r} in command-line override", fix)
            return
        self.put(canonical, key, value, "override")


#: Gives a file the settings name by (path as written, what it is): an `inputs.FileRead`.
Reader = Callable[[str, str], Any]


def _load_deepspeed_config(value: Any, diags: Diagnostics, read: Reader | None) -> Any:
    """deepspeed.config as a path -> the parsed JSON object (errors reported, {} returned).

    `read` (the gather stage's, `gather.CompileInputs.read`) gives the file's text by the
    path as written: normalise reads nothing itself. None: no file was gathered (an error)."""
    if not isinstance(value, str):
        return value
    if not value.strip():
        return {}
    if read is None:
        diags.error(K.DEEPSPEED_CONFIG, f"DeepSpeed config file {value} was not read before normalising",
                    "normalise with the gather stage's reader (tuner.compiler.gather)")
        return {}
    got = read(value, "DeepSpeed config file")
    path = got.path
    try:
        loaded = parse.parse_json(got.text(), str(path))
    except parse.FileError as exc:
        fix = ("fix the path (relative paths start at the settings file) or inline the config as a table"
               if exc.missing else "fix the JSON (a missing comma is the usual cause)" if exc.content else "")
        diags.error(K.DEEPSPEED_CONFIG, exc.message, fix)
        return {}
    if not isinstance(loaded, dict):
        diags.error(K.DEEPSPEED_CONFIG, f"{path} must hold a JSON object, not {type(loaded).__name__}")
        return {}
    diags.note(K.DEEPSPEED_CONFIG, f"read DeepSpeed config from {path}")
    return loaded


def normalise(
    data: dict[str, Any],
    diags: Diagnostics,
    overrides: list[str] | tuple[str, ...] = (),
    read: Reader | None = None,
    root: type = Settings,
) -> Normalised:
    """What the person wrote (`data`, `overrides`) -> the canonical settings, frozen. A
    DeepSpeed config named by path is taken from `read` (the gather stage's files). `root`: the
    declaration (tuner's `Settings`; a test may declare its own)."""
    idx = index_of(root)
    builder = _Builder(idx, diags)
    builder.take_file(data)
    for text in overrides:
        builder.take_override(text)
    builder.report_unreported()

    settings = idx.defaults()
    result = _Result(settings, set(builder.values), dict(builder.origin))
    for path, value in builder.values.items():
        info = idx.keys[path]
        written = builder.origin[path]
        value = copy.deepcopy(value)
        if path == K.DEEPSPEED_CONFIG:
            value = _load_deepspeed_config(value, diags, read)
            if isinstance(value, dict) and set(value) == {"deepspeed_config"} and isinstance(value["deepspeed_config"], dict):
                value = value["deepspeed_config"]
                diags.note(written, "unwrapped the outer 'deepspeed_config' object (the seed's config.json layout)")
            bad = parse.non_finite(value)
            if bad is not None:  # TOML has inf and nan; JSON (and DeepSpeed) has neither
                diags.error(f"deepspeed.config.{bad}", "must be a finite number (inf and nan cannot be written to "
                            "DeepSpeed's JSON)", "write a finite number")
                value = {}
                result.invalid.add(path)
        elif path == K.MODEL_FAMILY and isinstance(value, str) and value.strip().lower() in FAMILY_ALIASES:
            family, flavour = FAMILY_ALIASES[value.strip().lower()]
            if family != value:
                diags.note(written, f"model family {value!r} is trained as {family!r}"
                           + (f" (flavour {flavour!r})" if flavour else ""))
            if flavour and K.MODEL_FLAVOUR not in builder.values:
                settings["model"]["flavour"] = flavour
            value = family
        else:
            fixed = info.coerce(value)
            if fixed is not value and (fixed != value or type(fixed) is not type(value)):
                diags.note(written, f"normalised {_describe(value)} to {_describe(fixed)}")
            value = fixed
        settings[info.section][info.name] = value

    _validate(settings, result, diags, idx)
    return result.frozen()


_TYPE_WORDS = {"integer": "an integer", "number": "a number", "boolean": "true or false",
               "string": "a string", "array": "a list", "object": "a table"}


def _validate(settings: dict[str, Any], result: _Result, diags: Diagnostics, idx: SchemaIndex) -> None:
    value_checks.check_values(settings, result, diags, idx)
    value_checks.check_numbers(settings, result, diags, idx)
    value_checks.check_patterns(settings, result, diags, idx)
    if conforms(settings, idx.schema):
        return  # jsonschema would find nothing (conforms.py); its import is skipped, not its verdict
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(idx.schema)
    seen: set[str] = set()
    for err in sorted(validator.iter_errors(settings), key=lambda e: [str(p) for p in e.absolute_path]):
        parts = [str(p) for p in err.absolute_path]
        path = ".".join(parts[:2])
        if path in seen:  # one message per key (a wrong type also fails its enum)
            continue
        if path not in idx.keys:
            diags.error(".".join(parts), err.message)
            continue
        seen.add(path)
        info = idx.keys[path]
        written = result.origin.get(path, path)
        got = _describe(err.instance)
        if err.validator == "type":
            want = " or ".join(_TYPE_WORDS.get(t, t) for t in value_checks.schema_types(err.schema))
            message = f"must be {want} (got {got})"
        elif err.validator == "enum":
            choices = ", ".join(json.dumps(c) for c in err.schema["enum"])
            message = f"must be one of {choices} (got {got})"
        elif err.validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            message = f"{got} is out of range ({err.validator} {err.validator_value})"
        else:
            message = f"{err.message}"
        diags.error(written, message, info.description)
        settings[info.section][info.name] = copy.deepcopy(info.default)
        result.invalid.add(path)
