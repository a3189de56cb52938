"""Checks that need facts about the model or the machine, not just the settings.

The compiler stays torch-free and fast, so nothing here builds a model, and nothing here
reads a file: the facts come from the compile's inputs (`inputs.ModelFacts`: the
block-detection cache written by `tuner blocks` / the wizard, the built-in registry, a
local ``config.json``; `gather.CompileInputs.facts`: the hardware), gathered before.

* `check` refuses wrap classes the model does not contain, with the detected candidates as
  suggestions (when detection data exist for the model; else a note saying how to get
  them), and warns when the chosen strategy does not fit the stated or detected memory;
* `nvme_bytes` is the estimator's figure for what NVMe offload puts on each machine's disk
  (0 = unknown), which the rules stage hands to the DeepSpeed config's free-space check.

Relative model paths were resolved by the gather stage like the runtime does: against the
settings file's directory (the project directory).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from ..diagnostics import Diagnostics
from ..keys import paths as K
from ..keys.settings import Settings
from ..memory import estimate as _estimate
from ..memory.report import Estimate
from ..plan.plan import Plan
from ..plan.strategy import Strategy


def known_classes(s: Settings, found) -> tuple[set[str] | None, list[str], str]:
    """(classes in the model, suggested wrap classes, where that came from); the set is None
    when nothing is known without building the model. `found` is `inputs.ModelFacts`."""
    from ..read import builtin_models as tiny_configs

    m = s.model
    cached = found.detection
    if cached is not None:
        return cached.class_names(), list(cached.suggested), "block detection (cached)"
    if tiny_configs.is_builtin(m.path) and found.packaged is None:
        try:
            name = tiny_configs.resolve_name(m.path, m.family, m.flavour)
        except KeyError:
            return None, [], ""
        entry = tiny_configs.TINY_CONFIGS[name]
        return None, list(entry["suggested_wrap"]), f"built-in {name}"
    return None, [], ""


def _check_wrap_classes(s: Settings, diags: Diagnostics, found) -> None:
    f = s.fsdp
    if not f.enabled or f.auto_wrap_policy != "transformer" or not f.transformer_layer_cls_to_wrap:
        return
    classes, suggested, source = known_classes(s, found)
    wanted = list(f.transformer_layer_cls_to_wrap)
    if classes is None:
        if suggested:  # a built-in: its suggested classes are the ones it is known to have
            unknown = [c for c in wanted if c not in suggested]
            if not unknown:
                return
            diags.note(K.FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP,
                       f"{', '.join(unknown)} not among the known blocks of {source} "
                       f"({', '.join(suggested)}); run `tuner blocks {s.model.path}` to check every class")
            return
        if found.exists:
            diags.note(K.FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP,
                       "wrap classes not checked against the model: no block detection for it yet",
                       f"run `tuner blocks {s.model.path}` (meta device, seconds); the compiler then checks them")
        else:
            diags.note(K.FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP,
                       "wrap classes not checked: the model is not available on this machine")
        return
    for cls in wanted:
        if cls in classes:
            continue
        close = difflib.get_close_matches(cls, sorted(classes), n=1, cutoff=0.75)
        hint = f"did you mean {close[0]!r}? " if close else ""
        diags.error(K.FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP,
                    f"the model has no module class {cls!r} ({source}); FSDP would wrap nothing for it",
                    hint + ("detected candidates: " + ", ".join(suggested) if suggested
                            else f"see `tuner blocks {s.model.path}` for its classes"))


def _check_fit(s: Settings, plan: Plan, diags: Diagnostics, found, facts, ds_config) -> Estimate | None:
    try:
        est = _estimate.estimate(s, plan, facts, found=found, ds_config=ds_config)
    except (ValueError, TypeError, OSError, ZeroDivisionError):
        return None  # an estimate is advice; never let it break a compile
    c = est.chosen
    if c is None:
        return est
    if est.model is not None and est.model.uncertain:
        diags.note(K.MODEL_PATH, est.model.uncertain)
    if est.recommendation and est.recommendation != c.name:
        fix = f"the cheapest option that fits is {est.recommendation_line}"
    elif est.recommendation_line and not est.recommendation:
        fix = f"recommended: {est.recommendation_line}"
    else:
        fix = "raise the memory, shard further (FSDP2 / ZeRO-3), offload, or enable gradient checkpointing"
    fix += "; see `tuner estimate` for the table"
    if c.fits_gpu is False:
        diags.warning(K.HARDWARE_GPU_MEMORY_GIB,
                      f"{c.label} needs about {_estimate.gib(c.per_gpu)} per GPU; "
                      f"{_estimate.gib(est.usable_gpu)} usable of {_estimate.gib(est.gpu_capacity)} "
                      f"({100 * est.gpu_margin:.0f}% kept for fragmentation; {est.capacity_source})", fix)
    if c.fits_host is False:
        diags.warning(K.HARDWARE_HOST_MEMORY_GIB,
                      f"{c.label} needs about {_estimate.gib(c.per_host)} host RAM per machine; "
                      f"{_estimate.gib(est.host_capacity)} available ({est.capacity_source})",
                      _estimate.host_advice(c, est.host_capacity) + "; see `tuner estimate` for the table")
    return est


def check(s: Settings, plan: Plan, diags: Diagnostics, found, facts=None,
          ds_config: Mapping[str, Any] | None = None) -> Estimate | None:
    """Run the checks; returns the memory estimate they computed (None when there is none),
    which the compile result carries for `tuner estimate` and the wizard. `ds_config`: the
    plan's deepspeed.json (it names the optimizer DeepSpeed ranks run)."""
    _check_wrap_classes(s, diags, found)
    est = _check_fit(s, plan, diags, found, facts, ds_config)
    _check_model_path(s, plan, diags, found, est)
    return est


def _check_model_path(s: Settings, plan: Plan, diags: Diagnostics, found, est: Estimate | None) -> None:
    """A model path with nothing known about it: an unknown built-in is an error; a local path
    that is not there a warning where a folder beside it has a close name (a typo), else a note
    (a Hub id, or a path on the training machines). Either way it says that the memory fit
    was not checked, so that a plan that does not fit never looks as if it did."""
    if found is None or found.exists or found.detection is not None or (est is not None and est.model is not None):
        return
    from ..read import builtin_models

    path = str(s.model.path)
    if builtin_models.is_builtin(path):
        try:
            builtin_models.resolve_name(path, s.model.family, s.model.flavour)
        except KeyError as exc:
            name = path.split(":", 1)[1].strip() if ":" in path else ""
            close = difflib.get_close_matches(name, builtin_models.names(), n=1, cutoff=0.6)
            diags.error(K.MODEL_PATH, str(exc).strip("'\""),
                        f"did you mean builtin:{close[0]}?" if close else "use one of the built-ins listed")
        return
    unchecked = "its size is unknown, so the memory fit was not checked"
    if est is not None and est.gpu_capacity and plan.strategy:
        unchecked = (f"its size is unknown, so whether {plan.strategy} fits "
                     f"{_estimate.gib(est.gpu_capacity)} per GPU was not checked")
    if found.near:
        parent = path.rstrip("/").rpartition("/")[0]
        meant = " or ".join(f"{parent}/{n}" if parent else n for n in found.near)
        diags.warning(K.MODEL_PATH, f"model path {path!r} is not a folder on this machine; {unchecked}",
                      f"did you mean {meant}?")
    else:
        diags.note(K.MODEL_PATH, f"model path {path!r} is not a folder on this machine (a Hugging Face Hub id, "
                   f"or a path on the training machines); {unchecked}",
                   f"run `tuner blocks {path}` where the model is to record its size")


def nvme_bytes(s: Settings, strategy: Strategy, world: int, rph: int, platform: str, found) -> int:
    """What NVMe offload puts on each machine's disk under `strategy` on `world` processes,
    `rph` per machine (0: unknown; an estimate is advice, so an error is 0 too). `found`: the
    model's gathered `inputs.ModelFacts` (None: the model is unknown; this reads nothing). The
    rules stage asks before the plan exists, for the settings' own ZeRO stage."""
    if found is None:
        return 0
    try:
        return _estimate.nvme_bytes_per_host(s, strategy, world, rph, platform, found)
    except (ValueError, TypeError, OSError, ZeroDivisionError):
        return 0
