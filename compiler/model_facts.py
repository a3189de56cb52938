"""Checks that need facts about the model or the machine, not just the settings.

The compiler stays torch-free and fast, so nothing here builds a model: the facts come
from the block-detection cache (`block_cache`, written by `tuner blocks` / the wizard), the
built-in tiny configurations' registry, a local ``config.json`` (analytical parameter
count), and hardware facts (`hardware.local_facts`: injected, or saved by `tuner doctor`).

* `check` refuses wrap classes the model does not contain, with the detected candidates as
  suggestions (when detection data exist for the model; else a note saying how to get
  them), and warns when the chosen strategy does not fit the stated or detected memory;
* `nvme_bytes` is the estimator's figure for what NVMe offload puts on each machine's disk
  (0 = unknown), used by the free-space check.

Relative model paths are resolved like the runtime does: against the settings file's
directory (taken from the diagnostics' file name), else the working directory.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from . import estimate as _estimate
from .diagnostics import Diagnostics
from .rules import Plan
from .settings import Settings


def _base_dir(diags: Diagnostics | None) -> Path | None:
    if diags is not None and diags.file and not diags.file.startswith("<"):
        p = Path(diags.file)
        if p.is_file():
            return p.resolve().parent
    return None


def known_classes(s: Settings, base_dir: Path | None) -> tuple[set[str] | None, list[str], str]:
    """(classes in the model, suggested wrap classes, where that came from); the set is None
    when nothing is known without building the model."""
    from . import block_cache
    from . import builtin_models as tiny_configs

    m = s.model
    builtin = tiny_configs.is_builtin(m.path)
    location = m.path if builtin else str(_estimate._resolve_model_path(m.path, base_dir))
    cached = block_cache.find(location, m.family, m.flavour)
    if cached is not None:
        return cached.class_names(), list(cached.suggested), "block detection (cached)"
    if builtin and tiny_configs.packaged_dir(m.path) is None:
        try:
            name = tiny_configs.resolve_name(m.path, m.family, m.flavour)
        except KeyError:
            return None, [], ""
        entry = tiny_configs.TINY_CONFIGS[name]
        return None, list(entry["suggested_wrap"]), f"built-in {name}"
    return None, [], ""


def _check_wrap_classes(s: Settings, diags: Diagnostics, base_dir: Path | None) -> None:
    f = s.fsdp
    if not f.enabled or f.auto_wrap_policy != "transformer" or not f.transformer_layer_cls_to_wrap:
        return
    classes, suggested, source = known_classes(s, base_dir)
    wanted = list(f.transformer_layer_cls_to_wrap)
    if classes is None:
        from . import builtin_models as tiny_configs

        if suggested:  # a built-in: its suggested classes are the ones it is known to have
            unknown = [c for c in wanted if c not in suggested]
            if not unknown:
                return
            diags.note("fsdp.transformer_layer_cls_to_wrap",
                       f"{', '.join(unknown)} not among the known blocks of {source} "
                       f"({', '.join(suggested)}); run `tuner blocks {s.model.path}` to check every class")
            return
        local = tiny_configs.packaged_dir(s.model.path) or (
            None if tiny_configs.is_builtin(s.model.path) else _estimate._resolve_model_path(s.model.path, base_dir))
        if local is not None and Path(local).exists():
            diags.note("fsdp.transformer_layer_cls_to_wrap",
                       "wrap classes not checked against the model: no block detection for it yet",
                       f"run `tuner blocks {s.model.path}` (meta device, seconds); the compiler then checks them")
        else:
            diags.note("fsdp.transformer_layer_cls_to_wrap",
                       "wrap classes not checked: the model is not available on this machine")
        return
    for cls in wanted:
        if cls in classes:
            continue
        close = difflib.get_close_matches(cls, sorted(classes), n=1, cutoff=0.75)
        hint = f"did you mean {close[0]!r}? " if close else ""
        diags.error("fsdp.transformer_layer_cls_to_wrap",
                    f"the model has no module class {cls!r} ({source}); FSDP would wrap nothing for it",
                    hint + ("detected candidates: " + ", ".join(suggested) if suggested
                            else f"see `tuner blocks {s.model.path}` for its classes"))


def _check_fit(s: Settings, plan: Plan, diags: Diagnostics, base_dir: Path | None) -> None:
    from .hardware import local_facts

    try:
        est = _estimate.estimate(s, plan, local_facts(), base_dir)
    except (ValueError, TypeError, OSError, ZeroDivisionError):
        return  # an estimate is advice; never let it break a compile
    c = est.chosen
    if c is None:
        return
    if est.model is not None and est.model.uncertain:
        diags.note("model.path", est.model.uncertain)
    if est.recommendation and est.recommendation != c.name:
        fix = f"the cheapest option that fits is {est.recommendation_line}"
    elif est.recommendation_line and not est.recommendation:
        fix = f"recommended: {est.recommendation_line}"
    else:
        fix = "raise the memory, shard further (FSDP2 / ZeRO-3), offload, or enable gradient checkpointing"
    fix += "; see `tuner estimate` for the table"
    if c.fits_gpu is False:
        diags.warning("hardware.gpu_memory_gib",
                      f"{c.label} needs about {_estimate.gib(c.per_gpu)} per GPU; "
                      f"{_estimate.gib(est.usable_gpu)} usable of {_estimate.gib(est.gpu_capacity)} "
                      f"({100 * est.gpu_margin:.0f}% kept for fragmentation; {est.capacity_source})", fix)
    if c.fits_host is False:
        diags.warning("hardware.host_memory_gib",
                      f"{c.label} needs about {_estimate.gib(c.per_host)} host RAM per machine; "
                      f"{_estimate.gib(est.host_capacity)} available ({est.capacity_source})",
                      _estimate.host_advice(c, est.host_capacity) + "; see `tuner estimate` for the table")


def check(s: Settings, plan: Plan, diags: Diagnostics, base_dir: Path | None = None) -> None:
    base_dir = base_dir or _base_dir(diags)
    _check_wrap_classes(s, diags, base_dir)
    _check_fit(s, plan, diags, base_dir)


def nvme_bytes(s: Settings, plan: Plan, diags: Diagnostics | None = None, base_dir: Path | None = None) -> int:
    try:
        return _estimate.nvme_bytes_per_host(s, plan, base_dir or _base_dir(diags))
    except (ValueError, TypeError, OSError, ZeroDivisionError):
        return 0
