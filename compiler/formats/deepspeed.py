"""A DeepSpeed JSON config, kept as written ("auto" stays "auto") in ``deepspeed.config``.

A DeepSpeed JSON does not say how many processes run it. Where its batch numbers fix the
world size (``train_batch_size = micro × accumulation × world``) that size is imported;
otherwise the world size stays the launch's, and the note says so, because a compile for one
process must not pin batch numbers that DeepSpeed would reject at the real world size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..keys import paths as K
from .base import Imported

#: Top-level keys only DeepSpeed configs have (with the value type that marks them).
MARKERS: dict[str, type | tuple[type, ...]] = {
    "zero_optimization": dict, "train_micro_batch_size_per_gpu": (int, str), "fp16": dict, "bf16": dict,
    "optimizer": dict, "scheduler": dict, "zero_allow_untested_optimizer": bool, "steps_per_print": int,
    "wall_clock_breakdown": bool, "amp": dict, "activation_checkpointing": dict, "flops_profiler": dict,
    "autotuning": dict, "data_efficiency": dict, "compression_training": dict, "aio": dict,
    "zero_force_ds_cpu_optimizer": bool, "communication_data_type": str, "comms_logger": dict,
}
#: Keys no DeepSpeed config has: a file with them is a trainer's arguments, not DeepSpeed's.
FOREIGN = {"output_dir", "model_family", "model_type", "learning_rate", "per_device_train_batch_size",
           "fsdp", "fsdp_config", "deepspeed", "num_train_epochs", "max_train_steps", "model_name_or_path",
           "pretrained_model_name_or_path", "distributed_type"}


def matches(data: dict[str, Any]) -> bool:
    if FOREIGN & {k.lstrip("-") for k in data}:
        return False
    return any(isinstance(data.get(key), kind) for key, kind in MARKERS.items()) or (
        isinstance(data.get("train_batch_size"), (int, str)) and "gradient_accumulation_steps" in data)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def read(data: dict[str, Any], path: Path, out: Imported, world_known: bool = False) -> None:
    """`world_known`: an accelerate YAML beside it states the process count."""
    src = path.name
    out.set(K.DEEPSPEED_ENABLED, True, src)
    out.set(K.DEEPSPEED_CONFIG, data, src)
    if K.HARDWARE_PLATFORM not in out.values:
        out.set(K.HARDWARE_PLATFORM, "cuda", src)  # DeepSpeed's target; tuner refuses it on MPS/ROCm
    zero = data.get("zero_optimization")
    if isinstance(zero, dict) and str(zero.get("stage")) == "3":
        # accelerate's DeepSpeedPlugin (and the HF Trainer) build the model under zero.Init
        # for a stage-3 config unless told otherwise.
        out.default(K.DEEPSPEED_ZERO3_INIT, True, src,
                    "stage 3 with no zero3_init_flag: accelerate initialises the model sharded (zero.Init); kept")
    micro, accum, total = (_int(data.get(k)) for k in ("train_micro_batch_size_per_gpu",
                                                        "gradient_accumulation_steps", "train_batch_size"))
    if world_known or K.HARDWARE_NUM_PROCESSES in out.values:
        return
    if micro and total and not accum and data.get("gradient_accumulation_steps") in (None, "auto"):
        accum = 1  # accelerate's DeepSpeedPlugin fills an unset or "auto" accumulation with 1
    sp = _int(data.get("sequence_parallel_size")) or 1  # Ulysses: DeepSpeed's batch counts world / sp ranks
    if micro and accum and total and total % (micro * accum) == 0:
        world = total // (micro * accum) * sp
        out.set(K.HARDWARE_NUM_PROCESSES, world, src)
        per_sp = f" x sequence_parallel_size {sp}" if sp > 1 else ""
        out.remarks.append(f"{src}: num_processes {world} inferred from train_batch_size {total} / "
                           f"(micro {micro} x accumulation {accum}){per_sp}, the only world size DeepSpeed accepts")
    elif total and (micro or accum):
        out.remarks.append(f"{src}: train_batch_size {total} fixes micro x accumulation x world, but the file does "
                           "not say the world size: set hardware.num_processes to the number of GPUs you launch on "
                           "(compiled for 1 process until then)")
    else:
        out.remarks.append(f"{src}: a DeepSpeed config does not say how many processes run it: set "
                           "hardware.num_processes (compiled for 1 process until then); its batch keys stay as written")
