"""Building DeepSpeed's JSON from settings: builder fields and/or a raw config.

The raw ``deepspeed.config`` (DeepSpeed's own structure, as in the seed's manual example)
wins where it says something; builder fields fill the rest. Everything that DeepSpeed or
accelerate would otherwise leave as ``"auto"`` is resolved here, because tuner's artefacts
must be usable by plain DeepSpeed too, where nothing fills an ``"auto"``.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Any

from .diagnostics import Diagnostics
from .settings import Settings

#: DeepSpeed optimizer types tuner accepts (the seed's supported list), by lower-case name.
SUPPORTED_OPTIMIZERS = {
    name.lower(): name
    for name in ("AdamW", "Adam", "Adagrad", "Lamb", "OneBitAdam", "OneBitLamb", "ZeroOneAdam",
                 "MuAdam", "MuAdamW", "MuSGD", "Lion", "Muon")
}
#: Names that are DeepSpeed implementations rather than optimizers; replaced by AdamW.
REPLACED_OPTIMIZERS = {"cpuadam", "deepspeedcpuadam", "fusedadam", "fused_adam", "cpu_adam"}

#: DeepSpeed's own defaults, used where a config says "auto" for a bucket size that only
#: accelerate's model-aware prepare would fill.
_AUTO_BUCKETS = {
    "reduce_bucket_size": 500_000_000,
    "stage3_prefetch_bucket_size": 50_000_000,
    "stage3_param_persistence_threshold": 100_000,
    # DeepSpeed's shorter aliases for the same fields
    "prefetch_bucket_size": 50_000_000,
    "param_persistence_threshold": 100_000,
}
_NVME_PARAM_BUFFER = 100_000_000
_BYTES_PER_GIB = 1024**3


def normalise_optimizer(name: Any, key: str, diags: Diagnostics) -> str | None:
    """'adamw' -> 'AdamW'; cpuadam/fusedadam -> AdamW with a warning; unknown -> error."""
    if not isinstance(name, str):
        diags.error(key, f"optimizer type must be a string, got {name!r}")
        return None
    low = name.strip().lower().replace("-", "")
    if low in REPLACED_OPTIMIZERS:
        diags.warning(key, f"optimizer {name!r} is an implementation, not an optimizer choice; using 'AdamW'",
                      "write AdamW; DeepSpeed picks its CPU or fused kernel itself")
        return "AdamW"
    if low in SUPPORTED_OPTIMIZERS:
        canonical = SUPPORTED_OPTIMIZERS[low]
        if canonical != name:
            diags.note(key, f"normalised optimizer {name!r} to {canonical!r}")
        return canonical
    supported = ", ".join(SUPPORTED_OPTIMIZERS.values())
    diags.error(key, f"unsupported DeepSpeed optimizer {name!r}", f"use one of: {supported}")
    return None


def _pick(raw: dict, raw_key: str, label: str, setting_path: str, setting_value: Any,
          explicit: set[str], diags: Diagnostics) -> Any:
    """The raw config's value when it has a concrete one, else the setting's.

    Both given and different is an error: the person said two things.
    """
    value = raw.get(raw_key, "auto")
    if value == "auto" or value is None:
        return setting_value
    if setting_path in explicit and value != setting_value:
        diags.error(f"deepspeed.config.{label}",
                    f"{label} is {value!r} in the DeepSpeed config but {setting_path} = {setting_value!r}",
                    f"set it in one place only (remove {label} from deepspeed.config or {setting_path})")
    return value


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _derive_batch(total, micro, accum, world: int, t, diags: Diagnostics) -> tuple[int | None, int | None]:
    """Fill in whichever of micro batch / accumulation is missing, as DeepSpeed does."""
    for label, value in (("train_batch_size", total), ("train_micro_batch_size_per_gpu", micro),
                         ("gradient_accumulation_steps", accum)):
        if value is not None and not _positive_int(value):
            diags.error(f"deepspeed.config.{label}", f"{label} must be a positive integer, got {value!r}")
            return None, None
    if total is not None and (micro is None) != (accum is None):
        known = micro if micro is not None else accum
        if total % (known * world):
            diags.error("deepspeed.config.train_batch_size",
                        f"train_batch_size {total} is not divisible by {known} x world size {world}",
                        "make train_batch_size a multiple of the other factors, or remove it")
            return None, None
        derived = total // (known * world)
        label = "gradient_accumulation_steps" if accum is None else "train_micro_batch_size_per_gpu"
        diags.note(f"deepspeed.config.{label}", f"{label} = {derived}, derived from train_batch_size {total}")
        return (micro, derived) if accum is None else (derived, accum)
    if total is not None and micro is None and accum is None:
        micro = t.micro_batch_size
        if total % (micro * world) == 0:
            accum = total // (micro * world)
            diags.note("deepspeed.config.gradient_accumulation_steps",
                       f"gradient_accumulation_steps = {accum}, derived from train_batch_size {total}")
            return micro, accum
    return (micro if micro is not None else t.micro_batch_size,
            accum if accum is not None else t.gradient_accumulation_steps)


def _check_nvme_path(path_text: str, key: str, need_bytes: int, diags: Diagnostics, base_dir: Path | None) -> str:
    if not path_text:
        diags.error(key, "NVMe offload needs a directory for its swap files",
                    "set deepspeed.nvme_path (offload_param_path) to a directory on a fast local disk")
        return path_text
    path = Path(path_text).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = (base_dir / path)
    path = Path(os.path.abspath(path))
    if not path.is_dir():
        diags.error(key, f"NVMe offload path {path} does not exist or is not a directory",
                    f"create it (mkdir -p {path}) or point deepspeed.nvme_path at an existing directory")
    elif not os.access(path, os.W_OK | os.X_OK):
        diags.error(key, f"NVMe offload path {path} is not writable", "fix its permissions or choose another directory")
    else:
        free = shutil.disk_usage(path).free
        if need_bytes and free < need_bytes:
            diags.error(key, f"NVMe offload path {path} has {free / _BYTES_PER_GIB:.1f} GiB free; "
                        f"the offloaded state needs about {need_bytes / _BYTES_PER_GIB:.1f} GiB",
                        "free space there or choose a larger disk")
        elif not need_bytes:
            diags.note(key, f"NVMe offload path {path}: {free / _BYTES_PER_GIB:.1f} GiB free "
                       "(model size unknown, so no free-space check against an estimate)")
    return str(path)


def build(s: Settings, world_size: int, explicit: set[str], diags: Diagnostics,
          base_dir: Path | None = None, offload_bytes_hint: int = 0) -> tuple[dict[str, Any], Settings]:
    """The DeepSpeed JSON for settings `s`, and `s` with values adopted from a raw config.

    `offload_bytes_hint` is the estimator's figure for what NVMe must hold (0 = unknown).
    """
    raw: dict[str, Any] = copy.deepcopy(s.deepspeed.config) if isinstance(s.deepspeed.config, dict) else {}
    out: dict[str, Any] = raw
    t = s.training

    # Batch arithmetic: train_batch_size = micro x accumulation x data-parallel world. As in
    # DeepSpeed, a missing factor is derived from the other two; all three must agree.
    factors = []
    for raw_key, path, value in (("train_micro_batch_size_per_gpu", "training.micro_batch_size", t.micro_batch_size),
                                 ("gradient_accumulation_steps", "training.gradient_accumulation_steps",
                                  t.gradient_accumulation_steps)):
        if raw.get(raw_key, "auto") not in ("auto", None):
            factors.append(_pick(raw, raw_key, raw_key, path, value, explicit, diags))
        else:  # a setting the person wrote counts as given; a default lets DeepSpeed's rule derive it
            factors.append(value if path in explicit else None)
    micro, accum = factors
    given = raw.get("train_batch_size", "auto")
    given = None if given in ("auto", None) else given
    micro, accum = _derive_batch(given, micro, accum, world_size, t, diags)
    if micro is None:
        return out, s
    expected = micro * accum * world_size
    if given is not None and given != expected:
        diags.error("deepspeed.config.train_batch_size",
                    f"train_batch_size {given!r} does not equal train_micro_batch_size_per_gpu {micro} "
                    f"x gradient_accumulation_steps {accum} x world size {world_size} = {expected}",
                    "remove train_batch_size (tuner computes it), or change the micro batch, "
                    "the accumulation steps or hardware.num_processes so the product matches")
    out["train_batch_size"] = expected
    out["train_micro_batch_size_per_gpu"] = micro
    out["gradient_accumulation_steps"] = accum
    if micro != t.micro_batch_size or accum != t.gradient_accumulation_steps:
        diags.note("deepspeed.config", f"micro batch {micro} and accumulation {accum} come from the DeepSpeed config")
        t.micro_batch_size, t.gradient_accumulation_steps = micro, accum

    clip_default = s.deepspeed.gradient_clipping if "deepspeed.gradient_clipping" in explicit else t.max_grad_norm
    clip_path = "deepspeed.gradient_clipping" if "deepspeed.gradient_clipping" in explicit else "training.max_grad_norm"
    out["gradient_clipping"] = _pick(raw, "gradient_clipping", "gradient_clipping", clip_path, clip_default, explicit, diags)

    # Precision blocks follow training.mixed_precision unless the raw config decides.
    mp = t.mixed_precision
    for block, mode in (("bf16", "bf16"), ("fp16", "fp16")):
        section = out.get(block)
        if isinstance(section, dict) and section.get("enabled") not in ("auto", None):
            if section["enabled"] is True and mp != mode:
                if "training.mixed_precision" in explicit:
                    diags.error(f"deepspeed.config.{block}.enabled",
                                f"the DeepSpeed config enables {block} but training.mixed_precision = {mp!r}",
                                "set the precision in one place only")
                else:
                    diags.note(f"deepspeed.config.{block}", f"mixed precision {mode} taken from the DeepSpeed config")
                    t.mixed_precision = mp = mode
    for block, mode in (("bf16", "bf16"), ("fp16", "fp16")):
        section = out.setdefault(block, {})
        if not isinstance(section, dict):
            diags.error(f"deepspeed.config.{block}", f"{block} must be an object")
            continue
        section["enabled"] = mp == mode

    zero = out.setdefault("zero_optimization", {})
    if not isinstance(zero, dict):
        diags.error("deepspeed.config.zero_optimization", "zero_optimization must be an object")
        return out, s
    stage = _pick(zero, "stage", "zero_optimization.stage", "deepspeed.zero_stage", s.deepspeed.zero_stage, explicit, diags)
    if stage not in (0, 1, 2, 3):
        diags.error("deepspeed.config.zero_optimization.stage", f"ZeRO stage must be 0, 1, 2 or 3, got {stage!r}")
        stage = s.deepspeed.zero_stage
    zero["stage"] = stage
    s.deepspeed.zero_stage = stage
    for key, default in _AUTO_BUCKETS.items():
        if zero.get(key) == "auto":
            zero[key] = default
            diags.note(f"deepspeed.config.zero_optimization.{key}", f"resolved 'auto' to DeepSpeed's default {default}")
    if stage == 3:
        # DeepSpeed knows this field under two names; write one, never both.
        names = ("gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save")
        name = next((n for n in names if n in zero), names[1])
        if zero.get(name, "auto") == "auto":
            zero[name] = s.deepspeed.gather_16bit_weights_on_model_save

    _offload(out, zero, s, stage, explicit, diags, base_dir, offload_bytes_hint)
    _optimizer_and_scheduler(out, s, diags)
    out.setdefault("steps_per_print", 1_000_000)  # tuner prints its own progress
    out.setdefault("wall_clock_breakdown", False)
    _reject_leftover_auto(out, "deepspeed.config", diags)
    return out, s


def _offload(out, zero, s: Settings, stage: int, explicit, diags, base_dir, offload_bytes_hint) -> None:
    ds = s.deepspeed
    for which, builder_device in (("offload_optimizer", ds.offload_optimizer), ("offload_param", ds.offload_param)):
        block = zero.get(which)
        if block is None and builder_device != "none":
            block = zero[which] = {"device": builder_device, "pin_memory": ds.pin_memory}
        if block is None:
            continue
        if not isinstance(block, dict):
            diags.error(f"deepspeed.config.zero_optimization.{which}", f"{which} must be an object with a 'device'")
            continue
        device = str(block.get("device", "none")).lower()
        block["device"] = device
        key = f"deepspeed.{which}"
        if device not in ("none", "cpu", "nvme"):
            diags.error(key, f"{which}.device must be none, cpu or nvme, got {device!r}")
            continue
        if device == "none":
            continue
        if which == "offload_param" and stage != 3:
            # DeepSpeed ignores offload_param below stage 3 (the seed's own manual example
            # has one at stage 2); drop it so the artefact says what really happens.
            diags.warning(key, f"parameter offload only works with ZeRO stage 3; at stage {stage} DeepSpeed "
                          "ignores it, so it is left out of deepspeed.json",
                          "set deepspeed.zero_stage = 3 to offload parameters, or remove offload_param")
            del zero[which]
            ds.offload_param = "none"
            continue
        if which == "offload_optimizer" and stage == 0:
            diags.error(key, "optimizer offload needs ZeRO stage 1, 2 or 3", "set deepspeed.zero_stage")
        if device == "nvme":
            if stage != 3:
                diags.error(key, f"NVMe offload needs ZeRO stage 3 (stage is {stage})", "set deepspeed.zero_stage = 3 or offload to cpu")
            block["nvme_path"] = _check_nvme_path(str(block.get("nvme_path") or ds.nvme_path), "deepspeed.nvme_path",
                                                  offload_bytes_hint, diags, base_dir)
            if which == "offload_param":
                if not block.get("buffer_size"):
                    block["buffer_size"] = ds.buffer_size or max(_NVME_PARAM_BUFFER, offload_bytes_hint // 64)
                    diags.note("deepspeed.buffer_size", f"NVMe parameter buffer size chosen: {block['buffer_size']}")
                block.setdefault("buffer_count", 5)
                block.setdefault("max_in_cpu", 1_000_000_000)
            else:
                block.setdefault("buffer_count", 4)
                block.setdefault("fast_init", False)
            out.setdefault("aio", {"block_size": 1_048_576, "queue_depth": 8, "thread_count": 1,
                                   "single_submit": False, "overlap_events": True})
        block.setdefault("pin_memory", ds.pin_memory)
        for k in ("buffer_size", "buffer_count", "max_in_cpu"):
            if isinstance(block.get(k), float) and block[k].is_integer():
                block[k] = int(block[k])
        if which == "offload_optimizer":
            ds.offload_optimizer = device
        else:
            ds.offload_param = device


def _optimizer_and_scheduler(out, s: Settings, diags) -> None:
    t = s.training
    opt = out.get("optimizer")
    if opt is None:
        name = normalise_optimizer(s.deepspeed.optimizer, "deepspeed.optimizer", diags) or "AdamW"
        opt = out["optimizer"] = {"type": name, "params": {}}
        diags.note("deepspeed.optimizer", f"DeepSpeed optimizer: {name} (lr {t.learning_rate})")
    elif not isinstance(opt, dict) or "type" not in opt:
        diags.error("deepspeed.config.optimizer", "optimizer must be an object with a 'type'")
        return
    else:
        opt["type"] = normalise_optimizer(opt["type"], "deepspeed.config.optimizer.type", diags) or opt["type"]
    params = opt.setdefault("params", {})
    fills = {"lr": t.learning_rate, "weight_decay": t.weight_decay}
    if opt["type"] in ("AdamW", "Adam"):
        fills.update(betas=[0.9, 0.999], eps=1e-8)
    for key, value in fills.items():
        if params.get(key, "auto") == "auto":
            params[key] = value
    if (opt["type"] in ("AdamW", "Adam") and s.deepspeed.offload_optimizer == "none"
            and s.hardware.platform == "cpu"):
        # DeepSpeed's default Adam kernel is FusedAdam (CUDA); on CPU use torch's.
        params.setdefault("torch_adam", True)

    sched = out.get("scheduler")
    if sched is None:
        sched = out["scheduler"] = {"type": s.deepspeed.scheduler, "params": {}}
    if not isinstance(sched, dict) or "type" not in sched:
        diags.error("deepspeed.config.scheduler", "scheduler must be an object with a 'type'")
        return
    p = sched.setdefault("params", {})
    fills = {"warmup_min_lr": 0, "warmup_max_lr": t.learning_rate, "warmup_num_steps": max(1, t.warmup_steps),  # DeepSpeed refuses 0
             "warmup_type": "linear"}
    if sched["type"] in ("WarmupDecayLR", "WarmupCosineLR"):
        fills["total_num_steps"] = t.max_steps
        if sched["type"] == "WarmupCosineLR":
            fills = {"total_num_steps": t.max_steps, "warmup_num_steps": max(1, t.warmup_steps)}
        if not t.max_steps and p.get("total_num_steps", "auto") == "auto":
            diags.error("training.max_steps", f"scheduler {sched['type']} needs a total step count",
                        "set training.max_steps (max_train_steps)")
    if sched["type"] in ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR"):
        for key, value in fills.items():
            if p.get(key, "auto") == "auto":
                p[key] = value


def _reject_leftover_auto(node: Any, path: str, diags: Diagnostics) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            _reject_leftover_auto(value, f"{path}.{key}", diags)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _reject_leftover_auto(value, f"{path}[{i}]", diags)
    elif node == "auto":
        diags.error(path, "'auto' here would reach DeepSpeed unresolved: nothing fills it for this key",
                    "write a concrete value")
