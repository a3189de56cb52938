"""What the memory estimate knows about the model: `ModelSize` and where it came from.

First match wins (`model_size`):

1. the block-detection cache (`tuner blocks` built the model on the meta device: exact
   parameter count and parameter-size histogram);
2. the built-in tiny configurations (exact counts kept in the registry);
3. an analytic count from a local ``config.json`` (`estimate_shapes`: exact for the
   architectures it knows, flagged ``uncertain`` otherwise, naming `tuner blocks`).

Pure given what the gather stage found (`inputs.ModelFacts`); never builds a model,
never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..keys.choices import trained_family
from ..keys.settings import Settings
from .shapes import _cfg, analytic_count, architecture


@dataclass
class ModelSize:
    """The model facts the estimate needs."""

    parameters: int
    source: str
    """``detection`` (cache), ``builtin``, ``config.json`` or ``stated``."""
    param_numels: dict[int, int] = field(default_factory=dict)
    """Elements per parameter tensor -> count (empty when unknown)."""
    largest_block: int = 0
    """Parameters of the largest wrapped block (FSDP's unsharded unit); 0 = unknown."""
    config: dict[str, Any] = field(default_factory=dict)
    kind: str = "decoder"
    """``decoder``, ``encoder``, ``unet``, ``dit`` or ``unknown`` (for activations)."""
    uncertain: str = ""
    """Why the parameter count may be wrong (empty: exact or measured)."""


def histogram(sizes: list[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for n in sizes:
        out[n] = out.get(n, 0) + 1
    return out


def kind_of(config: dict[str, Any], family: str) -> str:
    cls = str(config.get("_class_name", ""))
    if cls:
        return "unet" if "UNet" in cls else "dit"
    if trained_family(family) == "embedding" or config.get("model_type") in ("bert", "roberta", "xlm-roberta", "electra",
                                                             "camembert", "mpnet"):
        return "encoder"
    return "decoder"


def resolve_model_path(path: str, base_dir: Path | None) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = (base_dir or Path.cwd()) / p
    return p


def transformer_blocks(config: dict[str, Any]) -> int:
    """How many repeated blocks the model has (Flux: double- plus single-stream blocks)."""
    n = int(_cfg(config, "num_hidden_layers", "n_layer", "num_layers", default=0) or 0)
    return n + int(config.get("num_single_layers") or 0)


def model_size(s: Settings, found: Any) -> tuple[ModelSize | None, str]:
    """What is known about the settings' model, and a sentence saying where it came from
    (or why nothing is known). `found` is what the gather stage read about the model
    (`inputs.ModelFacts`; `inputs.find_model` outside a compile). Reads nothing, never
    builds a model."""
    from ..read import builtin_models as tiny_configs  # pure dicts

    m = s.model
    builtin = tiny_configs.is_builtin(m.path) and found.packaged is None
    cached = found.detection
    if cached is not None:
        hist = {int(k): int(v) for k, v in cached.param_numels.items()}
        config = dict(cached.config)
        if cached.library == "diffusers":
            config.setdefault("_class_name", cached.model_class)
            if builtin:
                config["in_channels"] = 3  # the runtime trains built-in denoisers in pixel space
        return (ModelSize(cached.total_parameters, "detection", hist, cached.largest_block_parameters,
                          config, kind_of(config, m.family)),
                f"parameters from block detection of {m.path} (cached)")
    if builtin:
        try:
            name = tiny_configs.resolve_name(m.path, m.family, m.flavour)
        except KeyError as exc:
            return None, str(exc.args[0])
        entry = tiny_configs.TINY_CONFIGS[name]
        counted = analytic_count(entry["config"]) if entry["library"] == "transformers" else None
        hist = histogram(counted.sizes) if counted and sum(counted.sizes) == entry["parameters"] else {}
        config = dict(entry["config"])
        if entry["library"] == "diffusers":
            config.setdefault("_class_name", entry["class_name"])
            config["in_channels"] = 3  # the runtime trains built-in denoisers in pixel space
        return (ModelSize(entry["parameters"], "builtin", hist, 0, config, kind_of(config, m.family)),
                f"built-in {name}")
    if found.config is None:
        return None, (f"model {m.path} is not available here (no config.json); "
                      "the estimate needs the model's size: run the estimate where the model is")
    from ..parse import FileError, parse_json

    try:
        config = parse_json(found.config.text(), str(found.config_file))
    except FileError as exc:
        return None, exc.message
    counted = analytic_count(config) if isinstance(config, dict) and "_class_name" not in config else None
    if counted is None:
        return None, (f"no parameter count for {m.path}: run `tuner blocks {m.path}` once "
                      "(meta device, seconds) and the estimate reads its cached result")
    uncertain = ""
    if counted.uncertain:
        uncertain = (f"parameter count uncertain: {counted.uncertain}; run `tuner blocks {m.path}` "
                     "(meta device, seconds) for the exact count")
    return (ModelSize(sum(counted.sizes), "config.json", histogram(counted.sizes), 0, config, counted.kind,
                      uncertain), f"parameters counted from {found.config_file}")


__all__ = ["ModelSize", "model_size", "histogram", "kind_of", "resolve_model_path", "transformer_blocks",
           "architecture"]
