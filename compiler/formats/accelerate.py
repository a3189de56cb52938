"""accelerate's config (what `accelerate config` writes, as YAML or as JSON).

Unset keys import as what `accelerate launch` would really use (its launch parser's
defaults, then the plugin's), not tuner's defaults, so that the compiled YAML means what
the source meant: FSDP version 1, RAM-efficient loading and module-state sync on, no wrap
policy, no backward prefetch, a state dict type that follows the version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..keys import paths as K
from ..keys.schema import accelerate_names
from .base import Imported, ImportRefused

# accelerate's key names -> tuner's keys: the inverse of what emit writes, from the same
# ``accelerate=`` declarations (compiler/keys/sections/). Top-level gpu_ids is read apart ("all"
# is accelerate's default, not a choice), and fsdp_reshard_after_forward too (FSDP v1 spells
# it as a sharding strategy).
TOP = {k: v for k, v in accelerate_names("").items() if k != "gpu_ids"}
FSDP_KEYS = {k: v for k, v in accelerate_names("fsdp_config").items() if k != "fsdp_reshard_after_forward"}
DS_YAML_KEYS = accelerate_names("deepspeed_config")
# Keys that carry no decision, or that tuner always writes itself.
IGNORED = {
    "compute_environment", "distributed_type", "downcast_bf16", "main_training_function",
    "tpu_env", "tpu_use_cluster", "tpu_use_sudo", "use_cpu", "enable_cpu_affinity", "gpu_ids",
    "fsdp_config", "deepspeed_config", "parallelism_config", "dynamo_config",
}
#: accelerate launch types tuner runs; any other is refused (tuner has no platform for it).
STRATEGIES = {"NO", "MULTI_GPU", "MULTI_CPU", "FSDP", "DEEPSPEED"}
CP_KEYS = tuple(accelerate_names("parallelism_config"))


def matches(data: dict[str, Any]) -> bool:
    return "distributed_type" in data or "compute_environment" in data


def read(data: dict[str, Any], path: Path, out: Imported) -> None:
    from . import deepspeed

    src = path.name
    dtype = str(data.get("distributed_type", "NO"))
    if dtype in ("False", "NO"):
        dtype = "NO"  # YAML 1.1 reads a bare NO as false
    env = str(data.get("compute_environment", "LOCAL_MACHINE"))
    if env != "LOCAL_MACHINE":
        raise ImportRefused(f"{src}: a {env} config (compute_environment); tuner writes launch configs for local "
                            "machines (LOCAL_MACHINE) and has no equivalent for it")
    if dtype not in STRATEGIES:
        raise ImportRefused(f"{src}: distributed_type {dtype} has no tuner strategy (tuner runs NO, MULTI_GPU, "
                            "MULTI_CPU, FSDP and DEEPSPEED on CUDA, ROCm, MPS or CPU)")
    procs = data.get("num_processes")
    if dtype != "NO" and not (isinstance(procs, int) and not isinstance(procs, bool) and procs > 0):
        # accelerate launch refuses to guess it for a multi-process type (it asks for
        # --num_processes); tuner would otherwise compile one process, silently.
        raise ImportRefused(f"{src}: distributed_type {dtype} with no num_processes ({procs!r}): accelerate launch "
                            "does not guess the process count (it needs --num_processes); add `num_processes: N` "
                            "(the number of processes over all machines, usually your GPU count) to the file and "
                            "import it again")
    if str(data.get("mixed_precision", "no")).lower() == "fp8":
        raise ImportRefused(f"{src}: mixed_precision fp8 is not a precision tuner compiles (no, fp16, bf16)")
    if dtype == "FSDP":
        out.set(K.FSDP_ENABLED, True, src)
    elif dtype == "DEEPSPEED":
        out.set(K.DEEPSPEED_ENABLED, True, src)
    # The source's target, not the importing machine: a GPU config says cuda (item: judged
    # for where it runs, so an FSDP v1 config imports fine on a laptop).
    cpu = data.get("use_cpu") is True or dtype == "MULTI_CPU"
    out.set(K.HARDWARE_PLATFORM, "cpu" if cpu else "cuda", src)
    for key, target in TOP.items():
        if data.get(key) is not None:
            value = data[key]
            if key == "num_processes" and value == -1:
                continue
            out.set(target, value, src)
    if dtype == "NO" and isinstance(data.get("num_processes"), int) and data["num_processes"] > 1:
        # accelerate launch runs a NO config through its simple launcher: one process.
        out.set(K.HARDWARE_NUM_PROCESSES, 1, src)
        out.remarks.append(f"{src}: distributed_type NO with num_processes {data['num_processes']}: accelerate "
                           "launches one process, so it is imported as one")
    gpu_ids = data.get("gpu_ids")
    if gpu_ids not in (None, "all"):
        out.set(K.HARDWARE_GPU_IDS, gpu_ids, src)
    if dtype == "FSDP":
        # no fsdp_config: accelerate builds its plugin from its own defaults (FSDP v1)
        _fsdp(data["fsdp_config"] if isinstance(data.get("fsdp_config"), dict) else {}, src, out)
    ds = data.get("deepspeed_config") or {}
    if dtype == "DEEPSPEED" and isinstance(ds, dict):
        # the YAML's own flags first, so that the JSON only fills what they leave unset
        for key, value in sorted(ds.items(), key=lambda kv: kv[0] == "deepspeed_config_file"):
            if key in DS_YAML_KEYS:
                out.set(DS_YAML_KEYS[key], value, src)
            elif key == "deepspeed_config_file":
                found = _find_relative(Path(str(value)), path)
                if found is None:
                    out.remarks.append(f"{src}: deepspeed_config_file {value} not found next to {path.parent}; "
                                       "pass it as another source: tuner import YAML JSON")
                else:
                    from .base import load

                    deepspeed.read(load(found), found, out, world_known=True)
            elif key == "deepspeed_multinode_launcher":
                continue
            else:
                out.unmodelled[f"deepspeed_config.{key}"] = value
    if dtype == "DEEPSPEED" and isinstance(ds, dict) and not ds.get("deepspeed_config_file"):
        _deepspeed_defaults(src, out)
    _parallelism(data.get("parallelism_config"), src, out)
    dyn = data.get("dynamo_config") or {}
    if isinstance(dyn, dict) and dyn.get("dynamo_backend") not in (None, "NO", "no"):
        out.set(K.ACCELERATE_DYNAMO_BACKEND, str(dyn["dynamo_backend"]).lower(), src)
    for key, value in data.items():
        if key not in TOP and key not in IGNORED and value not in (None, [], {}, False):
            out.unmodelled[key] = value
    if out.unmodelled:
        out.set(K.ACCELERATE_BASE, str(path.resolve()), src)
        out.remarks.append(f"{src}: keys tuner does not model ({', '.join(sorted(out.unmodelled))}) survive "
                           "through accelerate.base")


def _fsdp(fsdp: dict[str, Any], src: str, out: Imported) -> None:
    for key, value in fsdp.items():
        if key in FSDP_KEYS:
            out.set(FSDP_KEYS[key], value, src)
        elif key == "fsdp_reshard_after_forward":
            if isinstance(value, bool):
                out.set(K.FSDP_RESHARD_AFTER_FORWARD, value, src)
            else:  # FSDP v1 spells it as a sharding strategy
                out.set(K.FSDP_SHARDING_STRATEGY, str(value).lower(), src)
                out.set(K.FSDP_RESHARD_AFTER_FORWARD, str(value).upper() in ("FULL_SHARD", "HYBRID_SHARD"), src)
        else:
            out.unmodelled[f"fsdp_config.{key}"] = value
    # What accelerate launch uses for what the file leaves unset (launch parser defaults,
    # then FullyShardedDataParallelPlugin's): keep that meaning, not tuner's defaults.
    version = fsdp.get("fsdp_version", 1)
    out.default(K.FSDP_VERSION, 1, src, "no fsdp_version, so accelerate would use FSDP v1; imported as version 1")
    out.default(K.FSDP_CPU_RAM_EFFICIENT_LOADING, True, src,
                "no fsdp_cpu_ram_efficient_loading: accelerate launch turns it on; imported as true")
    if str(version) == "1":
        out.default(K.FSDP_SYNC_MODULE_STATES, True, src,
                    "no fsdp_sync_module_states: accelerate launch turns it on for FSDP v1; imported as true")
        out.default(K.FSDP_BACKWARD_PREFETCH, "NO_PREFETCH", src,
                    "no fsdp_backward_prefetch: accelerate uses none; imported as NO_PREFETCH")
    out.default(K.FSDP_AUTO_WRAP_POLICY, "none", src,
                "no fsdp_auto_wrap_policy: accelerate wraps nothing (NO_WRAP); imported as none")
    out.default(K.CHECKPOINT_STATE_DICT_TYPE, "full" if str(version) == "1" else "sharded", src,
                "no fsdp_state_dict_type: accelerate's default for this FSDP version imported")


def _deepspeed_defaults(src: str, out: Imported) -> None:
    """A DeepSpeed setup in the YAML alone: what the file leaves unset is what accelerate's
    `DeepSpeedPlugin` uses (stage 2, no offload, zero.Init for stage 3, no 16-bit gather on
    save), not tuner's defaults."""
    out.default(K.DEEPSPEED_ZERO_STAGE, 2, src, "no zero_stage: accelerate's DeepSpeedPlugin uses stage 2; imported as 2")
    if str(out.values.get(K.DEEPSPEED_ZERO_STAGE)) == "3":
        out.default(K.DEEPSPEED_ZERO3_INIT, True, src,
                    "no zero3_init_flag: accelerate initialises a stage-3 model sharded (zero.Init); imported as true")
        out.default(K.DEEPSPEED_GATHER_16BIT_WEIGHTS_ON_MODEL_SAVE, False, src,
                    "no zero3_save_16bit_model: accelerate's default (false) imported")


def _parallelism(pc: Any, src: str, out: Imported) -> None:
    """Context parallelism (ring, cp_*) and Ulysses sequence parallelism (sp_*) are tuner's own
    settings (context_parallel.*); the other mesh dimensions (tensor, HSDP) are kept as
    accelerate's keys. The data-parallel sizes tuner derives from the process count."""
    if not isinstance(pc, dict) or not pc:
        return
    cp, sp = pc.get("parallelism_config_cp_size", 1), pc.get("parallelism_config_sp_size", 1)
    cp_on, sp_on = isinstance(cp, int) and cp > 1, isinstance(sp, int) and sp > 1
    names = accelerate_names("parallelism_config")
    if cp_on or sp_on:
        if cp_on:
            out.set(K.HARDWARE_PLATFORM, "cuda", src)
        for key, target in names.items():
            if key in pc and (key.startswith("parallelism_config_cp_") if cp_on else key.startswith("parallelism_config_sp_")):
                out.set(target, pc[key], src)
        # tuner writes the mesh (dp_shard from the process count); other keys are kept.
        rest = {k: v for k, v in pc.items() if k not in CP_KEYS and not (
            k == "parallelism_config_dp_shard_size" or (k.endswith(("_dp_replicate_size", "_tp_size")) and v == 1))}
    else:
        rest = dict(pc)  # accelerate turns the parallelism config on whenever the table is there
    if rest:
        out.set(K.ACCELERATE_PARALLELISM_CONFIG, rest, src)


def _find_relative(candidate: Path, yaml_path: Path) -> Path | None:
    if candidate.is_absolute():
        return candidate if candidate.is_file() else None
    for base in [yaml_path.parent, *yaml_path.parent.parents][:4]:
        if (base / candidate).is_file():
            return (base / candidate).resolve()
    return None
