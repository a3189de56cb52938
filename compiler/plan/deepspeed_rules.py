"""What DeepSpeed's own config models accept, checked without importing DeepSpeed.

`schemas/deepspeed_rules.json` is derived from DeepSpeed's pydantic models by
`python scripts/deepspeed_rules_gen.py schemas/deepspeed_rules.json`
(`tests/compiler/test_deepspeed_values.py` re-derives it and cross-checks bad values against
the real `DeepSpeedConfig`, so these rules cannot drift from the installed DeepSpeed).
The checks follow pydantic's lax mode, as DeepSpeed does: ``"true"`` is a bool, ``1e8`` an
int; they are never stricter than DeepSpeed, so nothing DeepSpeed accepts is refused.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from importlib import resources
from typing import Any

from ..diagnostics import Diagnostics

#: Keys whose "auto" accelerate fills in `Accelerator.prepare` (`_prepare_deepspeed`,
#: `DeepSpeedPlugin.set_mixed_precision`). Any other "auto" would reach DeepSpeed as is.
ACCELERATE_FILLS = frozenset({
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
    "fp16.enabled", "bf16.enabled",
    "zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save",
    "optimizer.params.lr", "optimizer.params.weight_decay",
    "scheduler.params.warmup_min_lr", "scheduler.params.warmup_max_lr", "scheduler.params.warmup_num_steps",
    "scheduler.params.total_num_steps",
})

#: "auto" under DeepSpeed's short alias names, which tuner renames to the stage3_ names
#: accelerate fills (deepspeed_config._zero).
_RENAMED_FOR_ACCELERATE = frozenset({"zero_optimization.prefetch_bucket_size",
                                     "zero_optimization.param_persistence_threshold"})

_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}


@lru_cache(maxsize=1)
def rules() -> dict[str, Any]:
    text = resources.files("tuner.schemas").joinpath("deepspeed_rules.json").read_text(encoding="utf-8")
    return json.loads(text)


#: An integer as pydantic's lax mode reads one from text ("4", " 01 ", "1_000", "4.0"; not "1e2").
_INT_TEXT = re.compile(r"\s*[+-]?[0-9]+(_[0-9]+)*(\.0+)?\s*")
#: The largest integer tuner writes: beyond it JSON readers that use doubles are not exact (the
#: manifest's batch factors are checked against the same bound by `tuner run`).
MAX_INT = 2**53 - 1


def _number(value: Any, kind: str) -> int | float | None:
    """`value` as the number DeepSpeed's config model (pydantic, lax mode) holds for an int or
    float field, or None where it refuses it. NaN and inf are refused (JSON has neither)."""
    if isinstance(value, bool):
        return int(value) if kind == "int" else float(value)
    if isinstance(value, str):
        if kind == "int":
            if not _INT_TEXT.fullmatch(value):
                return None
            return int(value.strip().split(".")[0])
        if not value.isascii():
            return None
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        if kind == "int":
            return int(value) if value.is_integer() else None
        return value
    if isinstance(value, int):
        return value
    return None


def _type_problem(value: Any, spec: dict[str, Any]) -> str | None:
    """Why pydantic (lax mode) would refuse `value` for a field described by `spec`."""
    kind = spec["type"]
    if value is None:
        return None if spec.get("nullable") else "must not be null"
    if kind == "bool":
        ok = isinstance(value, bool) or (isinstance(value, (int, float)) and value in (0, 1)) or (
            isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE)
        return None if ok else f"must be true or false, got {value!r}"
    if kind in ("int", "float"):
        num = _number(value, kind)
        if num is None:
            return f"must be {'an integer' if kind == 'int' else 'a finite number'}, got {value!r}"
        if kind == "int" and abs(num) > MAX_INT:
            return f"must be at most {MAX_INT:,} (2^53 - 1), got {value!r}"
        for bound, test, word in (("gt", num.__gt__, "greater than"), ("ge", num.__ge__, "at least"),
                                  ("lt", num.__lt__, "less than"), ("le", num.__le__, "at most")):
            if bound in spec and not test(spec[bound]):
                return f"must be {word} {spec[bound]}, got {value!r}"
        return None
    if kind == "str":
        return None if isinstance(value, str) else f"must be a string, got {value!r}"
    if kind == "enum":
        return None if value in spec["values"] and not isinstance(value, bool) else \
            f"must be one of {spec['values']}, got {value!r}"
    if kind in ("table", "block"):
        return None if isinstance(value, dict) else f"must be a table (JSON object), got {value!r}"
    return None


def _canonical(block: dict[str, Any], key: str, spec: dict[str, Any], path: str, diags: Diagnostics) -> None:
    """Write an accepted number as the number DeepSpeed's model reads ("4.0" -> 4, stage 2.0 -> 2):
    accelerate and DeepSpeed's own top-level batch code read the JSON value raw, and a string or a
    float there fails (TypeError) or names a "zero2.0" strategy."""
    value, kind = block[key], spec["type"]
    if kind in ("int", "float") and not isinstance(value, bool):
        fixed: Any = _number(value, kind)
        if kind == "float" and isinstance(value, int):
            fixed = value  # an int is a valid float field value as written
    elif kind == "enum" and isinstance(value, float) and value.is_integer():
        fixed = int(value)
    else:
        return
    if fixed is not None and (type(fixed) is not type(value) or fixed != value):
        block[key] = fixed
        diags.note(path, f"{key} {value!r} written as {fixed!r}, the number DeepSpeed reads it as")


def check(config: dict[str, Any], where: str, diags: Diagnostics) -> bool:
    """Report every value DeepSpeed's config models would refuse; True when none."""
    r = rules()
    before = len(diags.errors)
    for key, value in config.items():
        path = f"{where}.{key}"
        if key in r["removed_top_level"]:
            diags.error(path, f"DeepSpeed {r['deepspeed_version']} refuses {key!r}: {r['removed_top_level'][key]}",
                        f"remove {key} from the DeepSpeed config")
            continue
        spec = r["top_level"].get(key)
        if spec is None:
            continue  # DeepSpeed ignores keys it does not know at the top level; leftover_auto judges "auto"
        if value == "auto":
            if key not in ACCELERATE_FILLS:  # e.g. a whole block ("optimizer": "auto"): nothing fills it
                _unfilled_auto(path, diags)
            continue
        problem = _type_problem(value, spec)
        if problem:
            diags.error(path, f"{key} {problem}")
            continue
        _canonical(config, key, spec, path, diags)
        if spec["type"] == "table":
            _check_model(value, spec["model"], path, key, diags)
        elif spec["type"] == "block":
            _check_block(value, path, diags)
    return len(diags.errors) == before


def _spelling_of(key: str, fields: dict[str, Any]) -> str:
    """The one DeepSpeed field a key names: ``stage3_x`` is the alias of ``x``; a deprecated
    key names the field that replaced it."""
    spec = fields.get(key) or {}
    target = spec.get("deprecated")
    if isinstance(target, str) and target in fields:
        key = target
    return key.removeprefix("stage3_") if key.startswith("stage3_") and key.removeprefix("stage3_") in fields else key


def _two_spellings(block: dict[str, Any], fields: dict[str, Any], path: str, diags: Diagnostics) -> None:
    """DeepSpeed refuses one field given twice (an alias and its name, or a deprecated key and
    its replacement), even with equal values: say so for both keys at once."""
    seen: dict[str, str] = {}
    for key in block:
        field = _spelling_of(key, fields)
        if field in seen:
            diags.error(f"{path}.{key}", f"{seen[field]!r} and {key!r} are two spellings of one DeepSpeed setting "
                        f"({field}); DeepSpeed refuses both together", f"keep one of {seen[field]} and {key}")
        else:
            seen[field] = key


def _check_model(block: dict[str, Any], model: str, path: str, dotted: str, diags: Diagnostics) -> None:
    r = rules()
    m = r["models"][model]
    _two_spellings(block, m["fields"], path, diags)
    for key, value in block.items():
        kpath, kdotted = f"{path}.{key}", f"{dotted}.{key}"
        spec = m["fields"].get(key)
        if spec is None:
            if dotted == "zero_optimization" and key in r["removed_zero"]:
                diags.error(kpath, f"DeepSpeed {r['deepspeed_version']} refuses {key!r}: {r['removed_zero'][key]}",
                            f"remove {key}")
            elif m["extra"] == "forbid":
                known = ", ".join(sorted(k for k, s in m["fields"].items() if "deprecated" not in s))
                diags.error(kpath, f"{key!r} is not a {dotted} key DeepSpeed {r['deepspeed_version']} knows "
                            "(its config model refuses unknown keys)", f"remove it or fix the spelling; known: {known}")
            continue
        if value == "auto":
            if kdotted not in ACCELERATE_FILLS | _RENAMED_FOR_ACCELERATE:
                # DeepSpeed's config models drop an "auto" nothing filled (config_utils:
                # DeepSpeedConfigModel), so its own default applies: accepted, and said.
                default = "" if spec.get("default") is None else f" ({spec['default']!r})"
                diags.note(kpath, f"'auto' is not filled by accelerate here; DeepSpeed drops it and uses its "
                           f"default{default}", "write a value to choose another")
            continue
        problem = _type_problem(value, spec)
        if problem:
            diags.error(kpath, f"{key} {problem}")
            continue
        _canonical(block, key, spec, kpath, diags)
        if spec["type"] == "table" and isinstance(value, dict):
            _check_model(value, spec["model"], kpath, kdotted, diags)


def _check_block(block: dict[str, Any], path: str, diags: Diagnostics) -> None:
    """optimizer / scheduler: DeepSpeed reads a `type` string and a `params` table."""
    if not isinstance(block.get("type"), str):
        diags.error(f"{path}.type", f"{path.rsplit('.', 1)[-1]} needs a 'type' string, got {block.get('type')!r}")
    params = block.get("params", {})
    if not isinstance(params, dict):
        diags.error(f"{path}.params", f"params must be a table (JSON object), got {params!r}")


def leftover_auto(node: Any, path: str, dotted: str, diags: Diagnostics) -> None:
    """An "auto" that accelerate does not fill would reach DeepSpeed unresolved (inside the
    blocks DeepSpeed's config models read, `check` notes that DeepSpeed drops it)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if not dotted and rules()["top_level"].get(key, {}).get("type") == "table":
                continue
            leftover_auto(value, f"{path}.{key}", f"{dotted}.{key}" if dotted else str(key), diags)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            leftover_auto(value, f"{path}[{i}]", f"{dotted}[{i}]", diags)
    elif node == "auto" and dotted not in ACCELERATE_FILLS:
        _unfilled_auto(path, diags)


def _unfilled_auto(path: str, diags: Diagnostics) -> None:
    diags.error(path, "'auto' here would reach DeepSpeed unresolved: nothing fills it for this key "
                "(accelerate fills batch sizes, clipping, precision, bucket sizes and optimizer/scheduler "
                "learning-rate parameters)", "write a concrete value")
