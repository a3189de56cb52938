"""Checks of settings values that the schema's validator cannot express, each refusing the
value (falling back to the default, as `compiler/canonical/normalise.py` does for every invalid key)
and naming the key:

* numbers must be finite, integers where the key is an integer, and at most `MAX_NUMBER` in
  magnitude (the validator accepts 3.0 as an integer, and NaN or inf within any range); the
  runtime checks a manifest's settings with the same `numeric_problem`;
* text keys with a pattern must match it whole (`compiler/keys/patterns.py`: the values that reach
  launch.sh, slurm.sbatch and the manifests);
* tables and lists must hold only what JSON and YAML artefacts can (no TOML dates, no NaN);
* a ``~`` / ``~user`` path must expand on this machine.
"""

from __future__ import annotations

import copy
import datetime
import json
import math
import os
import re
from typing import Any

from ..diagnostics import Diagnostics
from ..keys import paths as K
from ..keys import patterns
from ..keys.schema import index


def _describe(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


#: The largest magnitude a numeric setting may have: integers beyond it are not exact in
#: JSON readers that use doubles, and nothing tuner configures comes near it.
MAX_NUMBER = 2**53 - 1


def schema_types(prop: dict[str, Any]) -> list[str]:
    """The JSON types a schema property allows (its "type", one or a list)."""
    t = prop.get("type", [])
    return t if isinstance(t, list) else [t]


def numeric_problem(prop: dict[str, Any], value: Any) -> str | None:
    """Why `value` is not acceptable for an integer or number key, or None. The schema's
    validator would accept 3.0 as an integer and NaN or inf within any range."""
    types = schema_types(prop)
    if not ({"integer", "number"} & set(types)) or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None  # not a numeric key, or a type error the schema reports
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number (got {value})"
    if "integer" in types and "number" not in types and isinstance(value, float):
        hint = f"; write {int(value)}" if value.is_integer() and abs(value) <= MAX_NUMBER else ""
        return f"must be an integer (got {value}){hint}"
    if abs(value) > MAX_NUMBER:
        return f"{_describe(value)} is too large (out of range: at most {MAX_NUMBER:,} in magnitude)"
    return None


def check_numbers(settings: dict[str, Any], result: Any, diags: Diagnostics, idx: Any = None) -> None:
    """Refuse non-finite, non-integral and huge numbers (falling back to the default)."""
    for path, info in (idx or index()).keys.items():
        value = settings[info.section][info.name]
        problem = numeric_problem(info.prop, value)
        if problem:
            diags.error(result.origin.get(path, path), problem, info.description)
            settings[info.section][info.name] = copy.deepcopy(info.default)
            result.invalid.add(path)


def check_patterns(settings: dict[str, Any], result: Any, diags: Diagnostics, idx: Any = None) -> None:
    """Text keys with a pattern (those that reach launch.sh, slurm.sbatch, the manifests) must
    match it whole: ``re.fullmatch``, as the schema validator's ``re.search`` lets ``$``
    match before a final newline (`compiler/keys/patterns.py`)."""
    for path, info in (idx or index()).keys.items():
        value, pattern = settings[info.section][info.name], info.setting.pattern
        if pattern and isinstance(value, str) and not re.fullmatch(pattern, value):
            what = patterns.WHAT.get(pattern, f"text matching {pattern}")
            diags.error(result.origin.get(path, path), f"must be {what} (got {_describe(value)})", info.description)
            settings[info.section][info.name] = copy.deepcopy(info.default)
            result.invalid.add(path)


def _unwritable(value: Any) -> tuple[str, str] | None:
    """(where, why) for the first value inside a table or list that JSON and YAML artefacts
    cannot hold as written: a TOML date or time, or NaN / inf; else None."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, (datetime.date, datetime.time)):
            return where, (f"is a TOML date/time ({node.isoformat()}), which DeepSpeed's JSON and accelerate's "
                           "YAML do not have; write it as a string or a number")
        if isinstance(node, float) and not math.isfinite(node):
            return where, f"must be a finite number (got {node}); JSON has no inf or nan"
        if isinstance(node, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
    return None


def _home_problem(value: Any) -> str | None:
    """Why a ``~`` / ``~user`` path cannot be expanded on this machine, else None."""
    texts = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)] \
        if isinstance(value, list) else []
    for text in texts:
        if text.startswith("~") and os.path.expanduser(text) == text:
            user = text[1:].split("/", 1)[0]
            return (f"{_describe(text)}: no user {user!r} on this machine" if user
                    else f"{_describe(text)}: the home directory is unknown ($HOME is not set)")
    return None


def check_values(settings: dict[str, Any], result: Any, diags: Diagnostics, idx: Any = None) -> None:
    """Values no artefact can hold (dates, NaN inside tables) and paths whose ``~`` cannot be
    expanded are refused here, naming the key, instead of failing when written or used."""
    for path, info in (idx or index()).keys.items():
        value = settings[info.section][info.name]
        written = result.origin.get(path, path)
        bad = _unwritable(value) if isinstance(value, (dict, list, datetime.date, datetime.time)) else None
        home = _home_problem(value)
        if bad is not None:
            diags.error(f"{written}.{bad[0]}" if bad[0] else written, bad[1])
        elif home is not None:
            diags.error(written, home, "write the path in full (or relative to the settings file)")
        if bad is not None or home is not None:
            settings[info.section][info.name] = copy.deepcopy(info.default)
            result.invalid.add(path)


def check_accelerate_base(cfg: dict[str, Any], diags: Diagnostics) -> None:
    """The merged accelerate config (`accelerate.base` under tuner's keys): values accelerate's
    launcher reads without checking them, so that a wrong one fails at `tuner run` with its
    traceback, are refused here (``gpu_ids: 0`` and ``[0, 1]`` are written as accelerate's
    string form, with a note)."""
    from ..keys import spellings

    if "gpu_ids" in cfg:
        raw = cfg["gpu_ids"]
        fixed = spellings.gpu_ids(raw)
        text = fixed.replace(" ", "") if isinstance(fixed, str) else None
        if text is None or not re.fullmatch(r"all|[0-9]{1,4}(,[0-9]{1,4}){0,1023}", text):
            diags.error(K.ACCELERATE_BASE, f"gpu_ids {_describe(raw)} in the base config is not \"all\" or GPU "
                        "indices", 'write gpu_ids: "all" or a comma-separated list such as "0,1"')
        elif text != raw:
            diags.note(K.ACCELERATE_BASE, f"gpu_ids {_describe(raw)} from the base config written as {text!r}, "
                       "the form accelerate's launcher reads")
            cfg["gpu_ids"] = text
    choices = index().keys[K.ACCELERATE_DYNAMO_BACKEND].setting.choices or ()
    dynamo = cfg.get("dynamo_config")
    for where, value in (("dynamo_config.dynamo_backend", dynamo.get("dynamo_backend") if isinstance(dynamo, dict)
                          else None), ("dynamo_backend", cfg.get("dynamo_backend"))):
        if value is not None and (not isinstance(value, str) or value.strip().lower() not in choices):
            diags.error(K.ACCELERATE_BASE, f"{where} {_describe(value)} in the base config is not a dynamo backend "
                        "accelerate knows", f"use one of {', '.join(c.upper() for c in choices)} (or remove it)")
    if dynamo is not None and not isinstance(dynamo, dict):
        diags.error(K.ACCELERATE_BASE, f"dynamo_config in the base config must be a mapping (got {_describe(dynamo)})")
