"""Cross-field rules and the plan: which strategy the settings mean, checked as a whole.

The rules stage of the compile (`check`): normalised settings in; diagnostics, the resolved
settings and the plan out. It changes nothing it is given and reads nothing: what it needs
from the world (the platform "auto" means, the model's facts, the NVMe directory) the gather
stage passes. The DeepSpeed config is built here, because a raw config may set what the plan
follows (the ZeRO stage, the batch factors); the plan is then made once, and settings and
plan are frozen (`Settings` is built frozen; a frozen `Plan`).

Each rule is a small function over typed settings that adds diagnostics. Messages the
seeds define are kept word for word (`FSDP and DeepSpeed cannot be enabled
simultaneously.`, `Context parallelism requires FSDP2.`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Any, cast

from ..canonical.normalise import Normalised
from ..diagnostics import Diagnostics
from ..keys import paths as K
from ..keys.choices import Platform
from ..keys.schema import index
from ..keys.settings import Settings, global_batch
from .plan import Plan
from .rules_runtime import check_runtime_keys
from .strategy import Strategy

MSG_FSDP_AND_DEEPSPEED = "FSDP and DeepSpeed cannot be enabled simultaneously."
MSG_CP_NEEDS_FSDP2 = "Context parallelism requires FSDP2."
#: Families `tuner run` trains; any other name compiles (the artefacts serve the user's own trainer).
#: Declared once, as model.family's offered choices (compiler/keys/sections/what.py).
TRAINED_FAMILIES: tuple[str, ...] = tuple(index().keys[K.MODEL_FAMILY].setting.open_choices or ())
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def deepspeed_requested(s: Settings) -> bool:
    return bool(s.deepspeed.enabled or s.deepspeed.config)


@dataclass(frozen=True)
class Checked:
    """What the rules stage hands on: the resolved settings and the plan (both frozen), and
    the DeepSpeed config when the plan uses DeepSpeed (None otherwise)."""

    settings: Settings
    plan: Plan
    deepspeed: Mapping[str, Any] | None = None


def _no_disk(text: str) -> Any:
    return None


#: What NVMe offload puts on each machine's disk: (settings, strategy, world, processes per
#: machine, platform, the model's facts) -> bytes, 0 when unknown. The memory estimate computes
#: it (`review/model_facts.py`'s `nvme_bytes`, a later stage), so the compile passes it in.
OffloadNeed = Callable[[Settings, Strategy, int, int, str, Any], int]


def check(n: Normalised, diags: Diagnostics, detected: str, found: Any = None,
          disks: Callable[[str], Any] = _no_disk, offload_need: OffloadNeed | None = None) -> Checked:
    """The rules stage: normalised settings -> diagnostics, resolved settings and the plan.

    Pure: `n` is not changed, and nothing is read. `detected` is what ``hardware.platform =
    "auto"`` means (the gather stage detected it); `found` is the model's gathered
    `inputs.ModelFacts` (the NVMe estimate; None: unknown), `disks` an NVMe path's gathered
    `inputs.DiskFacts`, `offload_need` the estimate's NVMe need (None: unknown, the free
    space is not compared). The DeepSpeed config is built here because a raw config may set the
    ZeRO stage, the batch factors and the precision, which the plan follows: the plan is made
    once, from the settings as they finally are."""
    s = _resolve(n, detected, diags)
    if s.hardware.platform != detected:  # compiled off the training machines: their paths are not here
        disks = _elsewhere(disks, f"this machine is {detected}, the target {s.hardware.platform}")
    explicit = n.explicit
    platform = s.hardware.platform
    ds_on = deepspeed_requested(s)

    # -- exclusivity and platform -----------------------------------------------------
    if s.fsdp.enabled and ds_on:
        diags.error(K.FSDP_ENABLED, MSG_FSDP_AND_DEEPSPEED,
                    "remove the DeepSpeed config (deepspeed.enabled / deepspeed_config) or set fsdp.enabled = false")
    if ds_on and platform in ("mps", "rocm"):
        name = "macOS (MPS)" if platform == "mps" else "ROCm"
        diags.error(K.DEEPSPEED_ENABLED, f"DeepSpeed is not available on {name} hosts.",
                    "use FSDP2 (fsdp.enabled = true) or DDP on this platform")
    if s.fsdp.enabled and s.fsdp.version == 1:
        if platform == "cpu" and not ds_on:
            # torch's FSDP v1 computes on CUDA-like devices only (_get_compute_device).
            diags.error(K.FSDP_VERSION, "FSDP v1 needs a GPU: torch's FSDP v1 cannot compute on CPU",
                        "use FSDP2 (fsdp.version = 2), which runs on CPU too, or target a GPU platform")
        else:
            diags.warning(K.FSDP_VERSION, "FSDP v1 is deprecated; it works, but FSDP2 shards per parameter, "
                          "supports LoRA and is the default for full-model runs", "set fsdp.version = 2")

    if s.model.family not in TRAINED_FAMILIES:
        diags.note(K.MODEL_FAMILY, f"tuner run cannot train model family {s.model.family!r} (it trains "
                   f"{', '.join(TRAINED_FAMILIES)}); the artefacts are for your own trainer "
                   "(accelerate launch --config_file BUILD/accelerate.yaml SCRIPT)")
    if s.training.max_steps == 0 and s.training.num_epochs == 0:
        diags.error(K.TRAINING_NUM_EPOCHS, "both training.max_steps and training.num_epochs are 0: nothing would train",
                    "set max_steps (max_train_steps) or num_epochs")

    check_runtime_keys(s, platform, diags)  # trackers, LoRA targets, QLoRA

    # -- context parallelism ----------------------------------------------------------
    cp = s.context_parallel
    if cp.size > 1:
        if cp.standalone and not s.fsdp.enabled and not ds_on:
            # SimpleTuner shards sequences itself; accelerate 1.15 only runs cp_size > 1 under FSDP2.
            diags.note(K.CONTEXT_PARALLEL_STANDALONE,
                       f"context parallelism (size {cp.size}) is left to the training script: accelerate.yaml is a "
                       "plain multi-GPU launch, the size is in manifest.json; tuner run does not train it")
        elif not s.fsdp.enabled or s.fsdp.version != 2:
            diags.error(K.CONTEXT_PARALLEL_SIZE, MSG_CP_NEEDS_FSDP2,
                        "enable FSDP with fsdp.version = 2, or set context_parallel.size = 1")
        if platform != "cuda":
            diags.error(K.CONTEXT_PARALLEL_SIZE, f"context parallelism is CUDA-only (target platform: {platform})",
                        "set context_parallel.size = 1, or hardware.platform = \"cuda\" when compiling for a CUDA machine")
        if s.hardware.num_processes % cp.size:
            diags.error(K.CONTEXT_PARALLEL_SIZE,
                        f"context_parallel.size {cp.size} must divide hardware.num_processes {s.hardware.num_processes}",
                        "pick a size that divides the process count")
    elif n.settings["context_parallel"]["comm_strategy"] != "allgather":
        written = n.settings["context_parallel"]["comm_strategy"]
        diags.note(K.CONTEXT_PARALLEL_COMM_STRATEGY,
                   f"context parallelism is off (size 1); rotation {written!r} normalised to 'allgather'")

    # -- FSDP details -----------------------------------------------------------------
    if s.fsdp.enabled:
        policy = s.fsdp.auto_wrap_policy
        if policy not in ("transformer", "size", "none") and not _DOTTED.match(policy):
            diags.error(K.FSDP_AUTO_WRAP_POLICY,
                        f"unknown wrap policy {policy!r}",
                        "use transformer, size, none, or a dotted path to a callable (package.module.function)")
        if policy != "transformer" and s.fsdp.transformer_layer_cls_to_wrap:
            diags.warning(K.FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP,
                          f"classes to wrap are ignored with the {policy!r} wrap policy",
                          "set fsdp.auto_wrap_policy = \"transformer\" or clear the class list")
        if s.fsdp.offload_params and platform == "cpu":
            diags.error(K.FSDP_OFFLOAD_PARAMS, "FSDP CPU offload moves parameters off the GPU; on a CPU target "
                        "they already live in host memory (and torch's offload policy needs an accelerator)",
                        "set fsdp.offload_params = false, or target a GPU platform")
        if s.fsdp.version == 2 and K.FSDP_SHARDING_STRATEGY in explicit:
            diags.note(K.FSDP_SHARDING_STRATEGY, "FSDP2 ignores sharding_strategy; it uses reshard_after_forward")
        if s.training.gradient_checkpointing and s.fsdp.activation_checkpointing:
            diags.warning(K.FSDP_ACTIVATION_CHECKPOINTING,
                          "both training.gradient_checkpointing and fsdp.activation_checkpointing are on; "
                          "FSDP's activation checkpointing is used", "turn one of them off")
    elif fsdp_keys := sorted(k for k in explicit if k.startswith("fsdp.") and k != K.FSDP_ENABLED):
        keys = ", ".join(fsdp_keys)
        diags.warning(K.FSDP_ENABLED, f"FSDP options are set ({keys}) but FSDP is off", "set fsdp.enabled = true or remove them")

    # -- topology ---------------------------------------------------------------------
    hw = s.hardware
    if hw.num_processes % hw.num_machines:
        diags.error(K.HARDWARE_NUM_PROCESSES,
                    f"num_processes {hw.num_processes} is not a multiple of num_machines {hw.num_machines}",
                    "num_processes counts ranks on all machines together; each machine runs the same number")
    if hw.machine_rank >= hw.num_machines:
        diags.error(K.HARDWARE_MACHINE_RANK, f"machine_rank {hw.machine_rank} must be below num_machines {hw.num_machines}")
    # Under Slurm or Kubernetes the scheduler names machine 0 when the job starts (launch.md).
    if hw.num_machines > 1 and not hw.main_process_ip and s.cluster.type == "none":
        diags.error(K.HARDWARE_MAIN_PROCESS_IP, "a multi-machine run needs the address of machine 0",
                    "set hardware.main_process_ip (main_process_ip), or cluster.type = \"slurm\" or "
                    "\"kubernetes\" to take it from the scheduler")

    # -- precision --------------------------------------------------------------------
    if s.training.mixed_precision == "fp16" and platform == "cpu":
        diags.warning(K.TRAINING_MIXED_PRECISION, "fp16 autocast is not supported on CPU; the run will use bf16 or fp32",
                      "use bf16 or no on CPU targets")

    # -- topology and the plan ------------------------------------------------------
    world = hw.num_processes
    if s.model.type == "lora" and s.fsdp.enabled and s.fsdp.version == 1:
        diags.note(K.MODEL_TYPE, "LoRA with FSDP v1 needs use_orig_params; tuner sets it")
    dp = world // cp.size if cp.size > 1 and world % cp.size == 0 else world
    _loop_under_deepspeed(s, ds_on, n.explicit, diags)
    sp = _deepspeed_sequence_parallel(s, ds_on, world, diags)
    dp = dp // sp if sp > 1 else dp
    rph = max(1, world // hw.num_machines)
    ds_cfg = None
    if ds_on:
        from . import deepspeed_config

        # the estimate's NVMe need at the settings' own ZeRO stage (the plan is made after the build)
        zero = Strategy.zero(s.deepspeed.zero_stage)
        need = offload_need(s, zero, world, rph, platform, found) if offload_need is not None else 0
        ds_cfg, s = deepspeed_config.build(s, dp, explicit, diags, disks, need)
    return Checked(s, _plan(s, ds_on, world, rph, dp, platform), ds_cfg)


def _elsewhere(disks: Callable[[str], Any], why: str) -> Callable[[str], Any]:
    """`disks`, each measured directory marked as measured off the training machines."""
    def measured(text: str) -> Any:
        disk = disks(text)
        return replace(disk, elsewhere=why) if disk is not None else None
    return measured


def _resolve(n: Normalised, platform: str, diags: Diagnostics) -> Settings:
    """The typed settings with what the rules decide for the person: the target platform of
    "auto", DeepSpeed on when a DeepSpeed config is given, the ring rotation of no context
    parallelism. A new value sharing nothing with `n` (a later stage cannot change it)."""
    s = Settings.from_dict({name: copy.deepcopy(dict(values)) for name, values in n.settings.items()})
    hw, ds, cp = s.hardware, s.deepspeed, s.context_parallel
    if hw.platform == "auto":
        hw = replace(hw, platform=cast(Platform, platform))  # the gather stage's detected_platform: one of them
        diags.note(K.HARDWARE_PLATFORM, f"target platform detected on this machine: {platform}",
                   "state hardware.platform when compiling for another machine (e.g. in CI)")
    if ds.config and not ds.enabled:
        ds = replace(ds, enabled=True)
    if cp.size <= 1 and cp.comm_strategy != "allgather":
        cp = replace(cp, comm_strategy="allgather")
    return replace(s, hardware=hw, deepspeed=ds, context_parallel=cp)


def _plan(s: Settings, ds_on: bool, world: int, rph: int, dp: int, platform: str) -> Plan:
    if ds_on:
        strategy, dtype = Strategy.zero(s.deepspeed.zero_stage), "DEEPSPEED"
    elif s.fsdp.enabled:
        strategy, dtype = Strategy.fsdp(s.fsdp.version), "FSDP"
    elif world > 1:
        strategy, dtype = Strategy.DDP, ("MULTI_CPU" if platform == "cpu" else "MULTI_GPU")
    else:
        strategy, dtype = Strategy.SINGLE, "NO"
    t = s.training
    return Plan(strategy=strategy, distributed_type=dtype, platform=platform, world_size=world,
                processes_per_machine=rph, data_parallel_size=dp,
                global_batch_size=global_batch(t.micro_batch_size, t.gradient_accumulation_steps, dp))


def _deepspeed_sequence_parallel(s: Settings, ds_on: bool, world: int, diags: Diagnostics) -> int:
    """Ulysses sequence parallelism, DeepSpeed's `sequence_parallel_size` or accelerate's
    `context_parallel.sp_size`: DeepSpeed checks the batch against world / sp data-parallel
    ranks, so the compile does too."""
    cp = s.context_parallel
    if cp.sp_size > 1:
        key, sp = K.CONTEXT_PARALLEL_SP_SIZE, cp.sp_size
        if not ds_on:
            diags.error(key, "Ulysses sequence parallelism (accelerate's sp_backend deepspeed) runs under DeepSpeed",
                        "set deepspeed.enabled = true, or context_parallel.sp_size = 1 (ring CP with FSDP2 is "
                        "context_parallel.size)")
            return 1
        if cp.size > 1:
            diags.error(key, "accelerate runs either context parallelism (cp) or sequence parallelism (sp), not both",
                        "set context_parallel.size = 1 or context_parallel.sp_size = 1")
            return 1
    else:
        raw = s.deepspeed.config if ds_on and isinstance(s.deepspeed.config, dict) else {}
        key, sp = "deepspeed.config.sequence_parallel_size", raw.get("sequence_parallel_size", 1)
        if not isinstance(sp, int) or isinstance(sp, bool) or sp <= 1:
            return 1
    if world % sp:
        diags.error(key, f"sequence parallel size {sp} does not divide the {world} processes (DeepSpeed's "
                    "data-parallel world is processes / sequence parallel size)",
                    f"set hardware.num_processes to a multiple of {sp}")
        return 1
    return sp


def _loop_under_deepspeed(s: Settings, ds_on: bool, explicit: AbstractSet[str], diags: Diagnostics) -> None:
    """Loop choices DeepSpeed's engine does not run: value clipping (it clips the global norm,
    `gradient_clipping`) and a packaged optimizer ZeRO refuses as untested."""
    t = s.training
    if not ds_on:
        return
    if t.clip_method == "value" and t.max_grad_norm > 0:
        diags.error(K.TRAINING_CLIP_METHOD, "DeepSpeed clips the global gradient norm only (gradient_clipping), not "
                    "each value", "set training.clip_method = 'norm', or use DDP/FSDP")
    named = K.DEEPSPEED_OPTIMIZER in explicit or "optimizer" in (s.deepspeed.config or {})
    if t.optimizer in ("lion", "prodigy") and not named:
        fix = "set deepspeed.optimizer = 'Lion' (DeepSpeed's own)" if t.optimizer == "lion" else "use adamw"
        diags.error(K.TRAINING_OPTIMIZER, f"{t.optimizer} is not an optimizer DeepSpeed's ZeRO runs from a script", fix)
