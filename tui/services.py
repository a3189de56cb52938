"""The services the wizard uses, injected into the app so that tests replace them.

Each default loads its module lazily, inside the call, because hardware detection and
block detection import torch: the wizard must paint first and never import torch to start.
A service whose module does not exist (yet) raises `ServiceUnavailable` with a sentence the
wizard shows as it is; nothing is ever faked.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..compiler.read.files import write_atomic


class ServiceUnavailable(Exception):
    """The service's module is not installed or not written yet."""


def _load(module: str, attr: str, what: str) -> Callable[..., Any]:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == module or module.startswith(exc.name + ".")):
            raise ServiceUnavailable(f"{what} is not available in this tuner ({module} is missing)") from None
        raise ServiceUnavailable(f"{what} needs {exc.name}, which is not installed") from None
    fn = getattr(mod, attr, None)
    if fn is None:
        raise ServiceUnavailable(f"{what} is not available ({module}.{attr} is missing)")
    return fn


def detect_hardware() -> Any:
    """HardwareFacts from `tuner doctor` (imports torch: call it in a worker thread).
    DeepSpeed's op probes (1-2 s) are skipped: the wizard shows GPUs, platform and memory."""
    return _load("tuner.runtime.doctor", "collect", "Hardware detection")(probe_ops=False)


def detect_blocks(model: str, family: str | None, flavour: str, refresh: bool) -> dict[str, Any]:
    """Block detection as a plain dict (imports torch: call it in a worker thread)."""
    detect = _load("tuner.runtime.blocks", "detect", "Block detection")
    result = detect(model, family=family, flavour=flavour, refresh=refresh)
    return result.to_dict()


def clear_detection_cache() -> Any:
    return _load("tuner.compiler.read.block_cache", "clear", "The block-detection cache")()


def clear_offload_cache(path: str) -> Any:
    return _load("tuner.runtime.maintenance", "clear_offload_cache", "DeepSpeed offload cache maintenance")(path)


def target_estimate(settings_text: str, settings_path: Path | None):
    """The estimator's `Estimate` for the TARGET the settings describe, or None.

    Capacities come from the settings only (hardware.gpu_memory_gib / host_memory_gib): the
    run usually targets other machines, so this machine's RAM and GPUs are never used (the
    table says "unknown" instead). Pure Python (no torch). The estimate is the one the
    compile computed (`CompileResult.estimate`), not a second computation."""
    try:
        from ..compiler.compile import compile_text
    except ImportError:
        return None
    result = compile_text(settings_text, path=settings_path, host_facts=False)
    return result.estimate if result.settings is not None and result.plan is not None else None


def estimate_table(settings_text: str, settings_path: Path) -> str | None:
    """The per-GPU table for the Review step (narrow: strategy, per GPU, per host, fits)."""
    try:
        est = target_estimate(settings_text, settings_path)
    except ImportError:
        return None
    if est is None:
        return "memory estimate unavailable: the settings do not compile yet"
    from .estimate_view import compact_table
    return compact_table(est)


def propose(settings_text: str, settings_path: Path | None) -> dict[str, Any]:
    """The quick start's proposal for these settings (see `estimate_view.proposal`)."""
    from .estimate_view import proposal
    return proposal(target_estimate(settings_text, settings_path))


def config_dir() -> Path:
    """tuner's per-user config directory (TUNER_CONFIG_DIR overrides it)."""
    forced = os.environ.get("TUNER_CONFIG_DIR")
    if forced:
        return Path(forced)
    import platformdirs
    return Path(platformdirs.user_config_dir("tuner"))


@dataclass
class Templates:
    """DeepSpeed builder templates: one JSON file per template in the config directory."""

    directory: Path

    def names(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.stem for p in self.directory.glob("*.json"))

    def save(self, name: str, values: dict[str, Any]) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name.strip()).strip("-.") or "template"
        return write_atomic(self.directory / f"{safe}.json", json.dumps(values, indent=2, sort_keys=True) + "\n")

    def load(self, name: str) -> dict[str, Any]:
        return json.loads((self.directory / f"{name}.json").read_text(encoding="utf-8"))


@dataclass
class Services:
    """Everything outside the settings file the wizard talks to."""

    hardware: Callable[[], Any] | None = detect_hardware
    blocks: Callable[[str, str | None, str, bool], dict[str, Any]] = detect_blocks
    clear_detection_cache: Callable[[], Any] = clear_detection_cache
    clear_offload_cache: Callable[[str], Any] = clear_offload_cache
    estimate: Callable[[str, Path], str | None] = estimate_table
    proposal: Callable[[str, Path | None], dict[str, Any]] = propose
    templates: Templates = field(default_factory=lambda: Templates(config_dir() / "deepspeed_templates"))
