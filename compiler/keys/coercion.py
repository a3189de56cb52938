"""Forgiving spellings -> canonical values, from a key's typed declaration.

A key's own spellings are declared with it (``spellings=`` in `compiler/keys/sections/`); then
the conversions its Python type allows: "2" -> 2 for an ``int``, "true" -> True for a
``bool``, "A, B" -> ["A", "B"] for a ``list[str]``, "Bf16" -> "bf16" for a key with
``choices``. What cannot be converted is returned as written (validation reports it).
normalise and the wizard's fields both coerce through `coerce_declared` (one coercer).
"""

from __future__ import annotations

import math
import re
from typing import Any

from .declare import Setting, type_parts
from .spellings import FALSE, TRUE

_INTEGER = re.compile(r"\s*[+-]?\d{1,19}\s*")


def coerce_typed(tp: Any, choices: tuple[Any, ...] | None, value: Any) -> Any:
    """The conversions the annotation `tp` (and the key's `choices`) allow."""
    kinds, item = type_parts(tp)
    if bool in kinds and isinstance(value, str):
        low = value.strip().lower()
        if low in TRUE:
            return True
        if low in FALSE:
            return False
    if int in kinds and not isinstance(value, bool):
        if isinstance(value, str) and _INTEGER.fullmatch(value):
            return int(value)
        # A float (3.0) stays a float and is refused: an integer setting is written as one.
    if float in kinds and isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return number if math.isfinite(number) else value  # "inf"/"nan" stay text and are refused
    if list in kinds and isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
        if item is int and all(re.fullmatch(r"\d+", i) for i in items):
            return [int(i) for i in items]
        return items
    if list in kinds and isinstance(value, list) and item is str:
        return [v.strip() if isinstance(v, str) else v for v in value]
    if choices and isinstance(value, str) and value not in choices:
        for choice in choices:
            if isinstance(choice, str) and choice.lower() == value.strip().lower():
                return choice
    return value


def coerce_declared(tp: Any, setting: Setting, value: Any) -> Any:
    """A value written for a key declared with type `tp` and facts `setting` -> its canonical
    value: the key's declared spellings, then the type-driven conversions."""
    specific = setting.spellings
    return coerce_typed(tp, setting.choices, specific(value) if specific else value)
