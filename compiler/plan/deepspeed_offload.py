"""DeepSpeed's offload, optimizer and scheduler blocks (`deepspeed_config.build`'s second half).

Offload: ZeRO-Offload to CPU or NVMe, checked against the ZeRO stage; the NVMe swap
directory is checked against what the compile's gather stage measured (`inputs.DiskFacts`),
never by looking at the disk here. Optimizer: the names tuner accepts, and no block for
ZeRO-Offload (accelerate swaps a torch Adam/AdamW for DeepSpeed's CPU Adam). Scheduler:
DeepSpeed's, with the "auto" parameters accelerate fills.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import Any, cast

from ..diagnostics import Diagnostics
from ..keys import paths as K
from ..keys.choices import OffloadDevice
from ..keys.settings import Settings

#: DeepSpeed optimizer types tuner accepts (the seed's supported list), by lower-case name.
SUPPORTED_OPTIMIZERS = {
    name.lower(): name
    for name in ("AdamW", "Adam", "Adagrad", "Lamb", "OneBitAdam", "OneBitLamb", "ZeroOneAdam",
                 "MuAdam", "MuAdamW", "MuSGD", "Lion", "Muon")
}
#: Names that are DeepSpeed implementations rather than optimizers; replaced by AdamW.
REPLACED_OPTIMIZERS = {"cpuadam", "deepspeedcpuadam", "fusedadam", "fused_adam", "cpu_adam"}

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


def _check_nvme_path(path_text: str, key: str, need_bytes: int, diags: Diagnostics, disk) -> str:
    """Check the swap directory (a relative one resolved against the settings file's
    directory, which is where tuner run starts DeepSpeed, by the gather stage) and return it
    as written, so the build stays portable. `disk` is its `inputs.DiskFacts`."""
    if not path_text:
        diags.error(key, "NVMe offload needs a directory for its swap files",
                    "set deepspeed.nvme_path (offload_param_path) to a directory on a fast local disk")
        return path_text
    if disk is None:
        diags.note(key, f"NVMe offload path {path_text} was not measured before the compile; it was not checked")
        return path_text
    path = disk.path
    if disk.elsewhere and not (disk.is_dir and disk.writable):
        diags.note(key, f"NVMe offload path {path} is not a writable directory on this machine ({disk.elsewhere}); "
                   "it belongs to the training machines and was not checked here",
                   "`tuner check` verifies it on each machine before the run")
    elif not disk.is_dir:
        diags.error(key, f"NVMe offload path {path} does not exist or is not a directory",
                    f"create it (mkdir -p {path}) or point deepspeed.nvme_path at an existing directory")
    elif not disk.writable:
        diags.error(key, f"NVMe offload path {path} is not writable", "fix its permissions or choose another directory")
    else:
        free = disk.free_bytes
        if need_bytes and free < need_bytes:
            diags.error(key, f"NVMe offload path {path} has {free / _BYTES_PER_GIB:.1f} GiB free; "
                        f"the offloaded state needs about {need_bytes / _BYTES_PER_GIB:.1f} GiB",
                        "free space there or choose a larger disk")
    return path_text


def offload(out, zero, s: Settings, stage: int, explicit, diags: Diagnostics,
            disks: Callable[[str], Any], offload_bytes_hint: int) -> Settings:
    """The offload blocks of the zero_optimization block `zero`, and the settings with the
    offload devices the run uses."""
    ds = s.deepspeed
    for which, builder_device in (("offload_optimizer", ds.offload_optimizer), ("offload_param", ds.offload_param)):
        block: dict[str, Any] | None = zero.get(which)
        if block is None and builder_device != "none":
            block = {"device": builder_device}
            zero[which] = block
            out["zero_optimization"] = zero
            if K.DEEPSPEED_PIN_MEMORY in explicit:
                block["pin_memory"] = ds.pin_memory
        if not isinstance(block, dict):
            continue
        device = str(block.get("device", "none"))
        key = f"deepspeed.{which}"
        if device == "none":
            continue
        if which == "offload_param" and stage != 3:
            # DeepSpeed ignores offload_param below stage 3 (the seed's own manual example
            # has one at stage 2); drop it so the artefact says what really happens.
            diags.warning(key, f"parameter offload only works with ZeRO stage 3; at stage {stage} DeepSpeed "
                          "ignores it, so it is left out of deepspeed.json",
                          "set deepspeed.zero_stage = 3 to offload parameters, or remove offload_param")
            del zero[which]
            ds = replace(ds, offload_param="none")
            continue
        if which == "offload_optimizer" and stage == 0:
            diags.error(key, "optimizer offload needs ZeRO stage 1, 2 or 3", "set deepspeed.zero_stage")
        if device == "nvme":
            if stage != 3:
                diags.error(key, f"NVMe offload needs ZeRO stage 3 (stage is {stage})",
                            "set deepspeed.zero_stage = 3 or offload to cpu")
            text = str(block.get("nvme_path") or ds.nvme_path)
            block["nvme_path"] = _check_nvme_path(text, K.DEEPSPEED_NVME_PATH, offload_bytes_hint, diags,
                                                  disks(text) if text else None)
            if which == "offload_param" and not block.get("buffer_size"):
                size = ds.buffer_size or offload_bytes_hint // 64
                if size > _NVME_PARAM_BUFFER:  # DeepSpeed's default, too small for the largest parameter
                    block["buffer_size"] = size
                    diags.note(K.DEEPSPEED_BUFFER_SIZE, f"NVMe parameter buffer size chosen: {size}")
        for k in ("buffer_size", "buffer_count", "max_in_cpu"):
            if isinstance(block.get(k), float) and block[k].is_integer():
                block[k] = int(block[k])
        adopted = cast(OffloadDevice, device)  # deepspeed_rules.check refused a device DeepSpeed does not know
        if which == "offload_optimizer":
            ds = replace(ds, offload_optimizer=adopted)
        else:
            ds = replace(ds, offload_param=adopted)
    return replace(s, deepspeed=ds)


#: training.optimizer values accelerate replaces with DeepSpeed's CPU Adam under ZeRO-Offload.
_OFFLOAD_OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam"}


def optimizer(out: dict, zero: dict, s: Settings, explicit: AbstractSet[str], builder: bool, diags: Diagnostics) -> None:
    t = s.training
    opt = out.get("optimizer")
    offload = str((zero.get("offload_optimizer") or {}).get("device", "none")) != "none"
    if opt is not None:
        opt["type"] = normalise_optimizer(opt["type"], "deepspeed.config.optimizer.type", diags) or opt["type"]
    elif K.DEEPSPEED_OPTIMIZER in explicit:
        name = normalise_optimizer(s.deepspeed.optimizer, K.DEEPSPEED_OPTIMIZER, diags) or "AdamW"
        opt = out["optimizer"] = {"type": name, "params": {"lr": "auto", "weight_decay": "auto"}}
        diags.note(K.DEEPSPEED_OPTIMIZER, f"DeepSpeed optimizer {name}; its lr and weight_decay are 'auto', "
                   "filled by accelerate (tuner run passes training.learning_rate and weight_decay)")
    elif offload and out.get("zero_force_ds_cpu_optimizer", True) is not False:
        # No block is added (what the settings or the source file say is what the JSON says):
        # accelerate's prepare replaces a torch Adam/AdamW with DeepSpeed's CPU Adam when the
        # JSON offloads the optimizer and names none, so a plain script runs with it, and it
        # would fail with a block ("cannot specify an optimizer in the config file and in the
        # code"). DeepSpeed refuses any other client optimizer with offload.
        if t.optimizer not in _OFFLOAD_OPTIMIZERS:
            diags.error(K.TRAINING_OPTIMIZER, f"ZeRO-Offload runs the optimizer with DeepSpeed's CPU Adam, which has "
                        f"no {t.optimizer!r} (DeepSpeed refuses another client optimizer with offload)",
                        "use training.optimizer = 'adamw' or 'adam', or set deepspeed.optimizer to a DeepSpeed optimizer")
            return
        diags.note("deepspeed.config.optimizer", "ZeRO-Offload with no optimizer block: accelerate replaces the "
                   "script's torch AdamW/Adam with DeepSpeed's CPU Adam (tuner run builds it directly); set "
                   "deepspeed.optimizer to have the JSON name one instead")
    if opt is None:
        return
    params = opt.setdefault("params", {})
    for key, value in (("betas", [0.9, 0.999]), ("eps", 1e-8)):
        if params.get(key) == "auto":
            # The HF Trainer fills these; accelerate does not, and DeepSpeed would get "auto".
            params[key] = value
            diags.note(f"deepspeed.config.optimizer.params.{key}", f"'auto' filled with {value} (the HF Trainer's and "
                       "torch's default): accelerate does not fill it")
    if (opt["type"] in ("AdamW", "Adam") and not offload and s.hardware.platform == "cpu"):
        # DeepSpeed's default Adam kernel is FusedAdam (CUDA); on a CPU target use torch's.
        params.setdefault("torch_adam", True)


#: The "auto" parameters accelerate fills for each of DeepSpeed's schedulers.
_SCHEDULER_AUTO = {
    "WarmupLR": ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps"),
    "WarmupDecayLR": ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps"),
    "WarmupCosineLR": ("warmup_num_steps", "total_num_steps"),
}


def scheduler(out: dict, s: Settings, explicit: AbstractSet[str], diags: Diagnostics) -> None:
    sched = out.get("scheduler")
    if sched is None and K.DEEPSPEED_SCHEDULER in explicit:
        name = s.deepspeed.scheduler
        sched = out["scheduler"] = {"type": name, "params": {k: "auto" for k in _SCHEDULER_AUTO.get(name, ())}}
    if sched is None:
        return
    severity = diags.warning if K.TRAINING_LR_SCHEDULER in explicit else diags.note
    severity("deepspeed.config.scheduler",
             f"the DeepSpeed config's scheduler {sched.get('type')} sets the learning rate; "
             f"training.lr_scheduler = {s.training.lr_scheduler!r} is not used",
             "remove the scheduler from the DeepSpeed config (and deepspeed.scheduler) to use training.lr_scheduler")


def blocks(out: dict, zero: dict, s: Settings, explicit: AbstractSet[str], builder: bool, diags: Diagnostics,
           disks: Callable[[str], Any], offload_bytes_hint: int) -> Settings:
    """`deepspeed_config.build`'s second half, in one call: the offload, optimizer and
    scheduler blocks, in that order; the settings with the offload devices the run uses."""
    s = offload(out, zero, s, zero.get("stage", 0), explicit, diags, disks, offload_bytes_hint)
    optimizer(out, zero, s, explicit, builder, diags)
    scheduler(out, s, explicit, diags)
    return s
