"""What the settings name, as it is on this machine: the model (`ModelFacts`, `find_model`),
the NVMe swap directory (`DiskFacts`, `measure_disk`), the platform ``hardware.platform =
"auto"`` means here, the installed packages' versions. `compiler/gather.py` calls these once,
at the edge, and hands their results to the compile in `CompileInputs`; the memory estimate
calls `find_model` for a caller outside the compile.

Paths are keyed as the settings write them; relative ones are resolved here, against the
project directory, never in the compile.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from .files import FileRead, read_file, resolve
from .hardware import HardwareFacts


@dataclass(frozen=True)
class DiskFacts:
    """The NVMe swap directory as it is now (checked against what offload will put there)."""

    path: Path
    is_dir: bool = False
    writable: bool = False
    free_bytes: int = 0
    elsewhere: str = ""
    """Set by the rules stage when this machine is not a training machine (the target platform
    the settings state is not this one's): why a missing directory here is not an error."""


@dataclass(frozen=True)
class ModelFacts:
    """What can be known about a model without building it."""

    location: str
    """A built-in's name, else the absolute path (the block-detection cache's key)."""
    exists: bool = False
    packaged: str | None = None
    """The folder of a packaged built-in (``builtin:all-minilm-l6-v2``)."""
    detection: Any = None
    """`block_cache.DetectionResult` from `tuner blocks`, when one is cached and fresh."""
    config_file: str | None = None
    config: FileRead | None = None
    """The model's ``config.json`` (for the analytic parameter count)."""
    near: tuple[str, ...] = ()
    """For a local path that is not there: the closest names of folders beside it (a typo's fix)."""


def model_key(path: str, family: str, flavour: str) -> tuple[str, str, str]:
    return (str(path), str(family), str(flavour or ""))


# --- the reading ----------------------------------------------------------------------------


def measure_disk(text: str, base_dir: Path) -> DiskFacts:
    path = Path(os.path.normpath(resolve(text, base_dir)))
    try:
        if not path.is_dir():
            return DiskFacts(path)
        if not os.access(path, os.W_OK | os.X_OK):
            return DiskFacts(path, True)
        return DiskFacts(path, True, True, shutil.disk_usage(path).free)
    except (OSError, ValueError):  # cannot even look: reported as not a usable directory
        return DiskFacts(path)


def find_model(path: str, family: str, flavour: str, base_dir: Path | None) -> ModelFacts:
    """What the block-detection cache, the built-in registry and the model's own
    ``config.json`` say about it; reads files, never builds the model."""
    from . import block_cache
    from . import builtin_models as tiny_configs

    packaged = tiny_configs.packaged_dir(path)
    builtin = tiny_configs.is_builtin(path)
    location = path if builtin else str(resolve(path, base_dir or Path.cwd()))
    detection = block_cache.find(location, family, flavour)
    local = packaged or (None if builtin else Path(location))
    cfg_file = block_cache.model_config_file(packaged or location, flavour) if (packaged or not builtin) else None
    exists = local is not None and Path(local).exists()
    return ModelFacts(location=location, exists=exists, near=() if exists or builtin else _near(Path(location)),
                      packaged=str(packaged) if packaged is not None else None, detection=detection,
                      config_file=str(cfg_file) if cfg_file is not None else None,
                      config=read_file(str(cfg_file), None, "model config") if cfg_file is not None else None)


def _near(path: Path) -> tuple[str, ...]:
    """Folders beside a missing `path` whose names are close to its own (at most 3)."""
    import difflib
    from itertools import islice

    try:
        names = [p.name for p in islice(path.parent.iterdir(), 5000) if p.is_dir()]
    except OSError:
        return ()
    return tuple(difflib.get_close_matches(path.name, names, n=3, cutoff=0.75))


def detected_platform(facts: HardwareFacts | None, stated: bool) -> str:
    """The facts' platform when a caller stated them; else what this machine is
    (``$TUNER_PLATFORM``, this host's facts, its device files)."""
    if stated and facts is not None and facts.platform in ("cuda", "rocm", "mps", "cpu"):
        return facts.platform
    from .hardware import local_facts
    from .platform_probe import detect_platform

    return detect_platform(facts if facts is not None else local_facts())


def tool_versions() -> dict[str, str]:
    """Versions from package metadata (the manifest's ``versions``): no heavy import happens here."""
    return dict(_tool_versions())


@lru_cache(maxsize=1)  # reading package metadata was half of a compile's time (the wizard compiles on every edit)
def _tool_versions() -> dict[str, str]:
    out = {"python": ".".join(map(str, sys.version_info[:3]))}
    for dist in ("tuner", "torch", "accelerate", "deepspeed", "transformers", "diffusers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


