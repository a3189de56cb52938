"""Block-detection results and their on-disk cache, readable without torch.

`tuner blocks` (``tuner.runtime.blocks.detect``) builds a model on the meta device and
records, per module class, the parameter total, the number of occurrences and a few sample
paths. That takes seconds (importing torch and transformers dominates), so the result is
kept in one JSON file in the user's cache directory, keyed like the seed's
``fsdp_block_cache.json``: model family, checkpoint path and flavour. The compiler and the
memory estimator read it from here without importing torch.

An entry remembers the SHA-256 of the model's config file; when the file changes the entry
is stale and ignored (a new detection replaces it). Writes are atomic (temporary file +
``os.replace``); a corrupt file is treated as empty, with a warning, and overwritten by the
next write.

The cache directory is ``$TUNER_CACHE_DIR`` when set (tests use a temporary one), else
platformdirs' user cache directory for ``tuner``.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CACHE_ENV = "TUNER_CACHE_DIR"
CACHE_FILE = "fsdp_block_cache.json"
CACHE_VERSION = 1


class CacheWarning(UserWarning):
    """A cache file could not be read and was treated as empty."""


# --- the result --------------------------------------------------------------------------

@dataclass
class ClassStat:
    """One module class of a model."""

    name: str
    """The class name, as FSDP's transformer wrap policy takes it (``LlamaDecoderLayer``)."""
    module: str
    """Where the class is defined (``transformers.models.llama.modeling_llama``)."""
    parameters: int
    """Parameters under all instances together (an instance counts its children)."""
    occurrences: int
    per_instance: int
    """Parameters of the largest instance."""
    sample_paths: list[str] = field(default_factory=list)
    """Up to three module paths (``model.layers.0``)."""


@dataclass
class DetectionResult:
    """What block detection found in one model. JSON-serialisable via `to_dict`."""

    model: str
    """The model as given (``builtin:tiny-llama`` or a directory)."""
    family: str
    flavour: str
    library: str
    """``transformers`` or ``diffusers``."""
    model_class: str
    total_parameters: int
    classes: list[ClassStat]
    """Every module class holding parameters, most parameters first."""
    no_split_modules: list[str]
    suggested: list[str]
    """Classes to wrap with FSDP's transformer policy."""
    param_numels: dict[str, int] = field(default_factory=dict)
    """Parameter size histogram: number of elements (as a string key) -> how many
    parameters have it. The estimator needs it for ZeRO-3's persistence threshold."""
    largest_block_parameters: int = 0
    """Parameters of the largest instance of a suggested class (FSDP's unsharded unit)."""
    config: dict[str, Any] = field(default_factory=dict)
    """The model configuration (shape fields the activation estimate reads)."""
    config_file: str = ""
    config_sha256: str = ""
    seconds: float = 0.0
    """Time to build and inspect the model (library imports excluded)."""
    cached: bool = False
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DetectionResult:
        data = dict(data)
        data["classes"] = [ClassStat(**c) for c in data.get("classes", [])]
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def class_names(self) -> set[str]:
        return {c.name for c in self.classes}

    def table(self, limit: int = 25) -> str:
        """A plain-text report (what `tuner blocks` prints)."""
        lines = [f"{self.model_class} ({self.library}, family {self.family}"
                 + (f", flavour {self.flavour}" if self.flavour else "") + f"): "
                 f"{human_count(self.total_parameters)} parameters" + ("  [cached]" if self.cached else "")]
        header = f"{'class':<36} {'params':>10} {'share':>6} {'count':>6}  sample paths"
        lines += ["", header, "-" * len(header)]
        total = max(1, self.total_parameters)
        for c in self.classes[:limit]:
            mark = "*" if c.name in self.suggested else " "
            paths = ", ".join(p or "<root>" for p in c.sample_paths)
            lines.append(f"{mark}{c.name:<35} {human_count(c.parameters):>10} {100 * c.parameters / total:5.1f}% "
                         f"{c.occurrences:>6}  {paths}")
        if len(self.classes) > limit:
            lines.append(f" ... {len(self.classes) - limit} more classes (--json lists all)")
        lines.append("")
        lines.append("_no_split_modules: " + (", ".join(self.no_split_modules) or "(none)"))
        lines.append("suggested classes to wrap (*): " + (", ".join(self.suggested) or "(none found)"))
        if self.suggested:
            lines.append(f"  settings: fsdp.transformer_layer_cls_to_wrap = {json.dumps(self.suggested)}")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def human_count(n: int, digits: int = 2) -> str:
    """1234567 -> '1.23M' (parameter counts in tables)."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.{digits}f}{unit}"
    return str(n)


# --- where the model's config lives -----------------------------------------------------

def model_config_file(path: str | os.PathLike, flavour: str = "") -> Path | None:
    """The config file that describes a local model directory, or None.

    A transformers checkpoint or a diffusers model folder has ``config.json``; a diffusers
    pipeline folder (``model_index.json``) is inspected through its denoiser subfolder:
    ``transformer/`` or ``unet/`` (the flavour picks when both exist).
    """
    p = Path(path).expanduser()
    if p.is_file():
        return p
    if (p / "config.json").is_file():
        return p / "config.json"
    if (p / "model_index.json").is_file():
        transformer_first = "transformer" in (flavour or "") or "dit" in (flavour or "")
        order = ("transformer", "unet") if transformer_first else ("unet", "transformer")
        for sub in order:
            if (p / sub / "config.json").is_file():
                return p / sub / "config.json"
    return None


def file_sha256(path: Path) -> str:
    """SHA-256 of a config file (read through the safe reader: a regular file, size-capped;
    `files.FileError` otherwise)."""
    from .files import read_bytes

    return hashlib.sha256(read_bytes(path, "model config")).hexdigest()


def builtin_sha256(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def cache_key(family: str, model: str, flavour: str = "") -> str:
    """family|checkpoint path|flavour; a local path is made absolute first."""
    text = str(model).strip()
    if not text.startswith("builtin"):
        text = os.path.abspath(os.path.expanduser(text))
    return f"{family}|{text}|{flavour or ''}"


def current_fingerprint(model: str, family: str | None, flavour: str = "") -> str | None:
    """The SHA-256 that a cache entry for this model must carry to be fresh, or None
    when the model cannot be found (a missing directory, an unknown built-in)."""
    from . import builtin_models as tiny_configs  # pure dicts, no torch

    packaged = tiny_configs.packaged_dir(model)
    if packaged is not None:
        model = str(packaged)
    elif tiny_configs.is_builtin(model):
        try:
            name = tiny_configs.resolve_name(model, family, flavour)
        except KeyError:
            return None
        return builtin_sha256(tiny_configs.TINY_CONFIGS[name]["config"])
    cfg = model_config_file(model, flavour)
    if cfg is None:
        return None
    from ..parse import FileError

    try:
        return file_sha256(cfg)
    except (OSError, FileError):
        return None


# --- the cache file ---------------------------------------------------------------------

def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("tuner", appauthor=False))


def cache_path() -> Path:
    return cache_dir() / CACHE_FILE


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    """One warning per problem and process: a compile looks the cache up several times."""
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, CacheWarning, stacklevel=4)


def _read() -> dict[str, Any]:
    from ..parse import FileError, parse_json
    from .files import read_text

    path = cache_path()
    try:
        data = parse_json(read_text(path, "block-detection cache"), str(path))
        if not isinstance(data, dict) or not isinstance(data.get("entries", {}), dict):
            raise FileError(f"{path}: not a JSON object with 'entries'", content=True)
    except FileError as exc:
        if not exc.missing:
            _warn_once(f"the block-detection cache is corrupt or unreadable ({exc.message}); treating it as empty")
        return {}
    return data.get("entries", {})


def _write(entries: dict[str, Any]) -> None:
    from .files import write_atomic

    payload = json.dumps({"version": CACHE_VERSION, "entries": entries}, indent=1, sort_keys=True)
    write_atomic(cache_path(), payload)


def get(model: str, family: str, flavour: str = "") -> DetectionResult | None:
    """The cached result for this model when its config is unchanged, else None."""
    entry = _read().get(cache_key(family, model, flavour))
    if not isinstance(entry, dict):
        return None
    fingerprint = current_fingerprint(model, family, flavour)
    if fingerprint is None or entry.get("config_sha256") != fingerprint:
        return None
    try:
        result = DetectionResult.from_dict(entry)
    except (TypeError, ValueError):
        return None
    result.cached = True
    return result


def find(model: str, family: str, flavour: str = "") -> DetectionResult | None:
    """`get`, falling back to a detection made without a flavour (a plain
    ``tuner blocks PATH``) when the settings name one; what the compiler uses."""
    found = get(model, family, flavour)
    if found is None and flavour:
        found = get(model, family, "")
    return found


def put(result: DetectionResult) -> Path:
    """Store a result (atomically); returns the cache file."""
    entries = _read()
    data = result.to_dict()
    data["cached"] = False
    entries[cache_key(result.family, result.model, result.flavour)] = data
    _write(entries)
    return cache_path()


def clear() -> int:
    """Remove every cached detection; returns how many entries there were."""
    path = cache_path()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheWarning)
        count = len(_read())
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    return count


def entries() -> dict[str, DetectionResult]:
    """Every cached entry by key (fresh or stale), for maintenance views."""
    out = {}
    for key, value in _read().items():
        try:
            out[key] = DetectionResult.from_dict(value)
        except (TypeError, ValueError):
            continue
    return out
