"""`schemas/deepspeed_rules.json`, derived from DeepSpeed's own pydantic config models.

`compiler/plan/deepspeed_rules.py` checks raw DeepSpeed configs against that file without
importing DeepSpeed; this script writes it, and imports DeepSpeed to do so (outside the
packages: no compile, no command imports it). Run it again when
the DeepSpeed version changes:

    python scripts/deepspeed_rules_gen.py schemas/deepspeed_rules.json

A test re-derives the file from the installed DeepSpeed and fails when the committed one is
stale (`tests/compiler/test_deepspeed_values.py`).
"""

from __future__ import annotations

import enum
import json
import sys
import types
import typing
from pathlib import Path, PurePath
from typing import Any

from tuner.compiler.diagnostics import EXIT_OK, EXIT_USAGE


def _field_spec(annotation, metadata) -> dict[str, Any]:
    from pydantic import BaseModel

    spec: dict[str, Any] = {}
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        spec["nullable"] = len(inner) < len(args)
        annotation = inner[0] if len(inner) == 1 else Any
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        spec["type"] = "table"
        spec["model"] = annotation.__name__
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        spec["type"] = "enum"
        spec["values"] = [m.value for m in annotation]
    elif annotation is bool:
        spec["type"] = "bool"
    elif annotation is int:
        spec["type"] = "int"
    elif annotation is float:
        spec["type"] = "float"
    elif annotation is str:
        spec["type"] = "str"
    elif isinstance(annotation, type) and issubclass(annotation, PurePath):
        spec["type"] = "str"
    else:
        spec["type"] = "any"
    for m in metadata:
        for bound in ("ge", "gt", "le", "lt"):
            if getattr(m, bound, None) is not None:
                spec[bound] = getattr(m, bound)
    return spec


def _model_rules(model, out: dict[str, Any]) -> None:
    from pydantic import BaseModel

    if model.__name__ in out:
        return
    fields: dict[str, Any] = {}
    out[model.__name__] = {"extra": model.model_config.get("extra", "ignore"), "fields": fields}
    for name, f in model.model_fields.items():
        spec = _field_spec(f.annotation, f.metadata)
        extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
        if extra.get("deprecated"):
            spec["deprecated"] = str(extra.get("new_param", ""))
        if f.default is None or isinstance(f.default, (bool, int, float, str, enum.Enum)):  # what "auto" falls back to
            spec["default"] = f.default.value if isinstance(f.default, enum.Enum) else f.default
        for key in {name, f.alias or name}:
            fields[key] = spec
        for arg in (f.annotation, *typing.get_args(f.annotation)):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                _model_rules(arg, out)


def derive_rules() -> dict[str, Any]:
    """What DeepSpeed's own config models accept, as data (needs deepspeed installed)."""
    import deepspeed
    import deepspeed.runtime.config as ds_config
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    models: dict[str, Any] = {}
    for model in (DeepSpeedZeroConfig, DeepSpeedBF16Config, DeepSpeedFP16Config):
        _model_rules(model, models)
    positive = {"type": "int", "gt": 0}
    return {
        "deepspeed_version": deepspeed.__version__,
        "top_level": {
            "zero_optimization": {"type": "table", "model": "DeepSpeedZeroConfig"},
            "bf16": {"type": "table", "model": "DeepSpeedBF16Config"},
            "bfloat16": {"type": "table", "model": "DeepSpeedBF16Config"},
            "fp16": {"type": "table", "model": "DeepSpeedFP16Config"},
            "train_batch_size": positive,
            "train_micro_batch_size_per_gpu": positive,
            "gradient_accumulation_steps": positive,
            "gradient_clipping": {"type": "float", "ge": 0},
            "steps_per_print": {"type": "int", "ge": 0},
            "optimizer": {"type": "block"},
            "scheduler": {"type": "block"},
        },
        "removed_top_level": dict(sorted(ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS.items())),
        "removed_zero": dict(sorted(ds_config._REMOVED_ZERO_CONFIG_KEYS.items())),
        "models": models,
    }


def render_rules(rules: dict[str, Any]) -> str:
    return json.dumps(rules, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python scripts/deepspeed_rules_gen.py OUT.json", file=sys.stderr)
        return EXIT_USAGE
    # DeepSpeed prints to stdout: the rules go to a file
    Path(argv[0]).write_text(render_rules(derive_rules()), encoding="utf-8")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
