"""The declaration helper: `setting(...)` records every fact about one settings key.

`compiler/keys/sections/` declares each key once (`compiler/keys/settings.py` gathers the sections),
as a dataclass field made by `setting`: its type is the field's annotation (for a key with closed
choices a `Literal` from `compiler/keys/choices.py`: its choices are read from it), and the rest
(default, help, aliases, bounds, forgiving spellings, accelerate's name for it, its place in the
wizard, the former keys it replaces) sits in the field's metadata as a `Setting`. A section class's
``step`` is the wizard step of its keys; a key declares ``step=`` only where it sits on another one.
Everything else is derived from that declaration: the JSON Schema (`compiler/keys/schema_gen.py`),
the schema index the compiler uses (`compiler/keys/schema.py`: defaults, and with
`compiler/keys/coercion.py` the type-driven coercion), normalise's per-key spellings, the accelerate
names emit writes and the importer reads, the key-path constants (`compiler/keys/paths.py`) and the
wizard's steps (`tui/layout.py`).

No imports from the rest of tuner: settings.py and the spelling tables depend on this module, never
the other way round.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

_T = TypeVar("_T")

#: The dataclass field metadata key under which a field's `Setting` is stored.
META = "tuner"


@dataclass(frozen=True)
class Setting:
    """Everything tuner knows about one key, except its name and type (the field's)."""

    default: Any
    help: str
    aliases: tuple[str, ...] = ()
    #: The only valid values (JSON Schema ``enum``): read from the key's `Literal` type by
    #: `declared` (`compiler/keys/choices.py`), never written in a declaration.
    choices: tuple[Any, ...] | None = None
    #: Values offered (wizard, `tuner schema`) where others are valid too (``x-choices``).
    open_choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    exclusive_minimum: float | None = None
    maximum: float | None = None
    pattern: str | None = None
    #: For a list of integers: each item's minimum.
    item_minimum: int | None = None
    #: A key-specific forgiving normaliser (written value -> canonical value), applied
    #: before the type-driven one. Its ``table`` attribute, when it has one, lists the
    #: spellings it accepts (lower case) for the editor input schema.
    spellings: Callable[[Any], Any] | None = None
    #: accelerate's names for this key, ``"fsdp_config.fsdp_version"`` style (the first is
    #: what tuner writes; later ones are only read by `tuner import`).
    accelerate: tuple[str, ...] = ()
    #: canonical value -> accelerate's value, where accelerate spells the value differently.
    accelerate_values: dict[Any, Any] | None = None
    #: The wizard step that shows the key where it is not its section's (the section class's
    #: ``step``; `Declared.step` resolves it), and its place among the step's main fields
    #: (None: the step's "Advanced" part, or no field where the wizard writes it itself).
    step: str = ""
    order: int | None = None
    #: Former keys of this section merged into this one: their name (``[section] name``, or
    #: ``name`` at top level, as the flat alias each had) -> {their value: this key's value}.
    #: They are still unknown keys; the error says what to write instead.
    replaces: dict[str, dict[Any, Any]] | None = None


def setting(default: _T, help: str, **facts: Any) -> _T:
    """A dataclass field declaring one settings key (see `Setting` for the facts). Typed as
    its default, so that the field's annotation is what mypy sees (a `Literal` from
    `compiler/keys/choices.py` for a key with closed choices, which are read from it)."""
    if "choices" in facts:
        raise TypeError("setting(choices=...): a key's closed choices are its type; annotate the field with a "
                        "Literal (compiler/keys/choices.py) instead")
    for name in ("aliases", "open_choices", "accelerate"):
        if isinstance(facts.get(name), (list, str)):
            facts[name] = tuple(facts[name]) if isinstance(facts[name], list) else (facts[name],)
    meta = {META: Setting(default, help, **facts)}
    field: Any
    if isinstance(default, (list, dict)):
        field = dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    else:
        field = dataclasses.field(default=default, metadata=meta)
    return typing.cast(_T, field)


def spelling_table(table: dict[str, Any], off: tuple[Any, ...] = (), off_value: Any = None) -> Callable[[Any], Any]:
    """A normaliser from a table of lower-case spellings (surrounding blanks ignored). `off`:
    non-text values (compared by identity: ``False``, ``None``) that mean `off_value`, as
    ``mixed_precision = false`` means "no". Its ``table`` and ``off`` attributes tell the
    editor input schema what the normaliser accepts."""

    def fn(value: Any) -> Any:
        if any(value is v for v in off):
            return off_value
        if isinstance(value, str):
            return table.get(value.strip().lower(), value)
        return value

    fn.table = table  # type: ignore[attr-defined]
    fn.off = off  # type: ignore[attr-defined]
    return fn


# --- reading the declaration -----------------------------------------------------------


@dataclass(frozen=True)
class Declared:
    """One declared key: where it is, its Python type, its facts, and its wizard step (its
    own ``step=``, else its section class's ``step``)."""

    section: str
    name: str
    type: Any
    setting: Setting
    step: str

    @property
    def path(self) -> str:
        return f"{self.section}.{self.name}"


def sections(root: type) -> dict[str, type]:
    """The section name -> section dataclass of the root settings class, in order."""
    hints = typing.get_type_hints(root)
    return {f.name: hints[f.name] for f in dataclasses.fields(root)}


def declared(root: type) -> list[Declared]:
    """Every declared key of the root settings class, in declaration order."""
    out = []
    for section, cls in sections(root).items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            fact, tp = f.metadata[META], hints[f.name]
            if literal_choices(tp) is not None:
                fact = dataclasses.replace(fact, choices=literal_choices(tp))
            out.append(Declared(section, f.name, tp, fact, fact.step or getattr(cls, "step", "")))
    return out


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array",
               type(None): "null"}


def literal_choices(tp: Any) -> tuple[Any, ...] | None:
    """A key's closed choices, read from its annotation: ``Literal["a", "b"]`` -> ``("a", "b")``,
    ``Literal["a"] | None`` -> ``("a", None)``; None for a type without a `Literal`."""
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        parts = [(None,) if arg is type(None) else literal_choices(arg) for arg in typing.get_args(tp)]
        if any(p is not None and p != (None,) for p in parts):
            return tuple(v for p in parts if p is not None for v in p)
    return None


def type_parts(tp: Any) -> tuple[tuple[type, ...], Any]:
    """A key's annotation -> (the Python types it admits, in order; a list's item type or None):
    ``bool | None`` -> ``((bool, NoneType), None)``, ``list[int]`` -> ``((list,), int)``. The
    schema's JSON types and the coercion of written values (`compiler/keys/coercion.py`) both
    come from this."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        kinds: tuple[type, ...] = ()
        item = None
        for arg in typing.get_args(tp):
            sub, sub_item = type_parts(arg)
            kinds += sub
            item = item or sub_item
        return kinds, item
    if typing.get_origin(tp) is Literal:
        return tuple(dict.fromkeys(type(v) for v in typing.get_args(tp))), None
    origin = typing.get_origin(tp) or tp
    return (origin,), (typing.get_args(tp)[0] if origin is list else None)


def json_type(tp: Any) -> tuple[list[str], Any]:
    """A Python annotation -> (JSON Schema type names, the item type for a list or None)."""
    kinds, item = type_parts(tp)
    return [_JSON_TYPES[k] for k in kinds], item
