"""Emitters: accelerate YAML, DeepSpeed JSON and the manifest (written by compiler/artefacts/build_writer.py).

Every accelerate key is written explicitly, because accelerate's launch defaults are
surprising (FSDP version 1, RAM-efficient loading on). When the YAML points at a DeepSpeed
JSON file it carries none of the keys accelerate forbids beside one (checked in
`accelerate.utils.dataclasses.DeepSpeedPlugin._deepspeed_config_checks`), and no
top-level ``mixed_precision``: the JSON's bf16/fp16 blocks decide.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..canonical import value_checks
from ..diagnostics import Diagnostics
from ..keys import paths as K
from ..keys.schema import accelerate_name, accelerate_names, index, index_of, written_accelerate_names
from ..keys.settings import Settings
from ..plan.plan import Plan
from ..read.inputs import tool_versions
from . import cluster

ACCELERATE_YAML = "accelerate.yaml"
DEEPSPEED_JSON = "deepspeed.json"
MANIFEST_JSON = "manifest.json"
MANIFEST_VERSION = 2  # 2: settings_file and deepspeed_config_file are relative paths

#: accelerate's names for keys, as declared with them (``accelerate=`` in compiler/keys/sections/):
#: nothing here spells one.
_A = accelerate_name
#: Keys accelerate refuses in `deepspeed_config` beside a `deepspeed_config_file`: every
#: declared one but the ZeRO-3 init flag.
DS_KEYS_FORBIDDEN_WITH_FILE = tuple(name for name in accelerate_names("deepspeed_config")
                                    if name != _A(K.DEEPSPEED_ZERO3_INIT))
#: accelerate's spelling of tuner's values, declared with the keys (``accelerate_values=``).
_WRAP_NAMES = index().keys[K.FSDP_AUTO_WRAP_POLICY].setting.accelerate_values or {}
_STATE_DICT_NAMES = index().keys[K.CHECKPOINT_STATE_DICT_TYPE].setting.accelerate_values or {}


def _value(s: Any, path: str) -> Any:
    section, name = path.split(".")
    return getattr(getattr(s, section), name)


def declared_values(s: Any, block: str = "", root: type = Settings) -> dict[str, Any]:
    """accelerate's name -> the settings' value (in accelerate's spelling, ``accelerate_values=``)
    for every key whose first ``accelerate=`` name is in `block` (``""``: the top level):
    the keys accelerate takes as tuner holds them."""
    out = {}
    for name, path in written_accelerate_names(block, root).items():
        value = _value(s, path)
        spelled = index_of(root).keys[path].setting.accelerate_values
        out[name] = spelled.get(value, value) if spelled and isinstance(value, str) else value
    return out


def fsdp_block(s: Settings) -> dict[str, Any]:
    f = s.fsdp
    policy = _WRAP_NAMES.get(f.auto_wrap_policy, "NO_WRAP")  # a dotted callable is applied by the runtime
    block: dict[str, Any] = {
        _A(K.FSDP_VERSION): f.version,
        _A(K.FSDP_AUTO_WRAP_POLICY): policy,
        _A(K.CHECKPOINT_STATE_DICT_TYPE): _STATE_DICT_NAMES[s.checkpoint.state_dict_type],
        _A(K.FSDP_CPU_RAM_EFFICIENT_LOADING): f.cpu_ram_efficient_loading,
        # Broadcasting rank 0's weights is needed only when rank 0 alone loads them.
        _A(K.FSDP_SYNC_MODULE_STATES): f.cpu_ram_efficient_loading,
        _A(K.FSDP_OFFLOAD_PARAMS): f.offload_params,
        _A(K.FSDP_ACTIVATION_CHECKPOINTING): f.activation_checkpointing,
    }
    if f.version == 2:
        block[_A(K.FSDP_RESHARD_AFTER_FORWARD)] = f.reshard_after_forward
    else:
        strategy = f.sharding_strategy.upper()
        if not f.reshard_after_forward and strategy == "FULL_SHARD":
            strategy = "SHARD_GRAD_OP"
        block[_A(K.FSDP_RESHARD_AFTER_FORWARD)] = strategy  # accelerate reads a v1 strategy there too
        block[_A(K.FSDP_USE_ORIG_PARAMS)] = True
        block[_A(K.FSDP_BACKWARD_PREFETCH)] = "BACKWARD_PRE"
        block[_A(K.FSDP_FORWARD_PREFETCH)] = False
    # Set explicitly (an imported config's own choice): written as given, for either version.
    for path in (K.FSDP_FORWARD_PREFETCH, K.FSDP_BACKWARD_PREFETCH, K.FSDP_USE_ORIG_PARAMS, K.FSDP_SYNC_MODULE_STATES):
        if _value(s, path) is not None:
            block[_A(path)] = _value(s, path)
    if policy == "TRANSFORMER_BASED_WRAP" and f.transformer_layer_cls_to_wrap:
        block[_A(K.FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP)] = ",".join(f.transformer_layer_cls_to_wrap)
    if policy == "SIZE_BASED_WRAP":
        block[_A(K.FSDP_MIN_NUM_PARAMS)] = f.min_num_params
    return block


def accelerate_config(s: Settings, plan: Plan, deepspeed_path: str | None) -> dict[str, Any]:
    """`deepspeed_path` is written as given: relative to the project directory (where
    `accelerate launch --config_file build/accelerate.yaml` is run from)."""
    hw = s.hardware
    top = declared_values(s)  # the declared top-level keys (num_processes, mixed_precision, ...)
    ip = top.pop(_A(K.HARDWARE_MAIN_PROCESS_IP))
    cfg: dict[str, Any] = dict(sorted({
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": plan.distributed_type,
        "downcast_bf16": "no",
        "enable_cpu_affinity": False,
        "main_training_function": "main",
        "tpu_env": [],
        "tpu_use_cluster": False,
        "tpu_use_sudo": False,
        "use_cpu": plan.platform == "cpu",
        **top,
    }.items()))
    cfg["dynamo_config"] = ({} if s.accelerate.dynamo_backend == "no"
                            else {"dynamo_backend": s.accelerate.dynamo_backend.upper()})
    if hw.num_machines > 1:
        cfg[_A(K.HARDWARE_MAIN_PROCESS_IP)] = ip
    if plan.uses_deepspeed:
        assert deepspeed_path is not None
        del cfg[_A(K.TRAINING_MIXED_PRECISION)]
        cfg["deepspeed_config"] = {
            "deepspeed_config_file": deepspeed_path,
            _A(K.DEEPSPEED_ZERO3_INIT): bool(s.deepspeed.zero3_init and s.deepspeed.zero_stage == 3),
        }
        if hw.num_machines > 1:
            cfg["deepspeed_config"]["deepspeed_multinode_launcher"] = "standard"
    elif plan.uses_fsdp:
        cfg["fsdp_config"] = fsdp_block(s)
        if s.context_parallel.size > 1 and not s.context_parallel.standalone:
            cfg["parallelism_config"] = {
                _A(K.CONTEXT_PARALLEL_SIZE): s.context_parallel.size,
                _A(K.CONTEXT_PARALLEL_COMM_STRATEGY): s.context_parallel.comm_strategy,
                "parallelism_config_dp_replicate_size": 1,
                "parallelism_config_dp_shard_size": plan.data_parallel_size,
                "parallelism_config_tp_size": 1,
            }
    cp = s.context_parallel
    if plan.uses_deepspeed and cp.sp_size > 1:  # Ulysses (ALST): accelerate's sp keys beside DeepSpeed
        cfg["parallelism_config"] = {
            "parallelism_config_dp_replicate_size": 1,
            "parallelism_config_dp_shard_size": plan.data_parallel_size,
            "parallelism_config_tp_size": 1,
            _A(K.CONTEXT_PARALLEL_SP_SIZE): cp.sp_size,
            _A(K.CONTEXT_PARALLEL_SP_BACKEND): cp.sp_backend,
            _A(K.CONTEXT_PARALLEL_SP_SEQ_LENGTH_IS_VARIABLE): cp.sp_seq_length_is_variable,
            _A(K.CONTEXT_PARALLEL_SP_ATTN_IMPLEMENTATION): cp.sp_attn_implementation,
        }
    if s.accelerate.parallelism_config:
        # Other mesh dimensions (tensor, sequence parallelism, HSDP) as the settings give them;
        # the CP keys above come from context_parallel.* and win.
        cfg["parallelism_config"] = {**s.accelerate.parallelism_config, **cfg.get("parallelism_config", {})}
    return cfg


#: Every top-level key accelerate's config loader accepts (`ClusterConfig`'s fields, plus
#: the two legacy keys its `process_config` converts); any other key in a base config makes
#: `accelerate launch` refuse the merged file. tests/reliability checks it against accelerate.
ACCELERATE_CONFIG_KEYS = frozenset({
    "command_file", "commands", "compute_environment", "debug", "deepspeed_config", "distributed_type",
    "downcast_bf16", "dynamo_config", "enable_cpu_affinity", "fp8_config", "fsdp_config", "gpu_ids",
    "machine_rank", "main_process_ip", "main_process_port", "main_training_function", "megatron_lm_config",
    "mixed_precision", "mpirun_config", "num_machines", "num_processes", "parallelism_config", "rdzv_backend",
    "same_network", "tpu_env", "tpu_name", "tpu_use_cluster", "tpu_use_sudo", "tpu_vm", "tpu_zone", "use_cpu",
    "fp16", "dynamo_backend",
})
#: Keys whose value accelerate reads as a mapping.
ACCELERATE_CONFIG_BLOCKS = ("deepspeed_config", "dynamo_config", "fp8_config", "fsdp_config", "megatron_lm_config",
                            "mpirun_config", "parallelism_config")

#: Top-level accelerate keys that tuner's settings decide. The other keys tuner writes are
#: only there to be explicit (accelerate's defaults); a base config's values win for those.
#: They are the declared top-level names (but gpu_ids: a base config's choice of GPUs stays)
#: and the strategy's blocks.
DECIDED_KEYS = frozenset(name for name in written_accelerate_names("") if name != _A(K.HARDWARE_GPU_IDS)) | frozenset({
    "distributed_type", "use_cpu", "fsdp_config", "deepspeed_config", "parallelism_config",
})


def merge_base(base: dict[str, Any], ours: dict[str, Any], plan: Plan, diags: Diagnostics) -> dict[str, Any]:
    """Our decisions over the user's existing accelerate config; their other keys survive."""
    ours = {k: v for k, v in ours.items() if k in DECIDED_KEYS or k not in base}
    merged = dict(base)
    strategy_blocks = ("deepspeed_config", "fsdp_config", "megatron_lm_config", "parallelism_config")
    for block in strategy_blocks:
        if block in merged and block not in ours:
            if merged[block]:
                diags.note(K.ACCELERATE_BASE, f"dropped {block} from the base config: the run uses {plan.strategy}")
            del merged[block]
    for key, value in ours.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and key != "deepspeed_config":
            merged[key] = {**merged[key], **value}
        elif key == "deepspeed_config" and isinstance(merged.get(key), dict):
            kept = {k: v for k, v in merged[key].items() if k not in DS_KEYS_FORBIDDEN_WITH_FILE}
            dropped = sorted(set(merged[key]) - set(kept))
            if dropped:
                diags.note(K.ACCELERATE_BASE, f"dropped {', '.join(dropped)} from the base deepspeed_config: "
                           "they now live in deepspeed.json (accelerate refuses them beside a config file)")
            merged[key] = {**kept, **value}
        else:
            if key in merged and merged[key] != value and key not in ("distributed_type",):
                diags.note(K.ACCELERATE_BASE, f"{key}: {merged[key]!r} from the base config replaced by {value!r}")
            merged[key] = value
    if plan.uses_deepspeed:
        merged.pop(_A(K.TRAINING_MIXED_PRECISION), None)
    return merged


def files(s: Settings, plan: Plan, deepspeed: Mapping[str, Any] | None, deepspeed_path: str | None,
          base: dict[str, Any], out_dir: Path, port_explicit: bool, settings_file: str | None, settings_text: str,
          versions: dict[str, str], diags: Diagnostics) -> dict[str, str] | None:
    """Every artefact's text, in one call: accelerate.yaml (merged into the `base` config when
    there is one), deepspeed.json (the plan's config, rendered), the cluster launch files and
    the manifest; None when the merged accelerate config is refused (`diags` says why)."""
    ours = accelerate_config(s, plan, deepspeed_path)
    cfg = merge_base(base, ours, plan, diags) if base else ours
    if base:
        value_checks.check_accelerate_base(cfg, diags)
        if not diags.ok:
            return None
    out = {ACCELERATE_YAML: render_yaml(cfg)}
    if deepspeed is not None:
        out[DEEPSPEED_JSON] = render_json(deepspeed)
    out.update(cluster.files(s, plan, out_dir, port_explicit))  # launch.sh, slurm.sbatch, Kubernetes manifests
    out[MANIFEST_JSON] = render_json(manifest(s, plan, settings_file, settings_text, out, diags, versions))
    return out


def render_yaml(cfg: dict[str, Any]) -> str:
    return yaml.safe_dump(cfg, sort_keys=True, default_flow_style=False, allow_unicode=True)


def render_json(obj: Any) -> str:
    # allow_nan=False: NaN and Infinity are not JSON; the compiler refuses them before here,
    # so one reaching this point is a bug that must not produce a file DeepSpeed misreads.
    return json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def manifest(s: Settings, plan: Plan, settings_file: str | None, settings_text: str,
             artefacts: dict[str, str], diags: Diagnostics, versions: dict[str, str] | None = None) -> dict[str, Any]:
    hw = s.hardware
    return {
        "manifest_version": MANIFEST_VERSION,
        "settings_file": settings_file,  # relative to the build directory
        "settings_sha256": sha256(settings_text),
        "settings": s.to_dict(),
        "plan": plan.to_dict(),
        "topology": {
            "platform": plan.platform,
            "num_machines": hw.num_machines,
            "num_processes": hw.num_processes,
            "processes_per_machine": plan.processes_per_machine,
            "machine_rank": hw.machine_rank,
            "main_process_ip": hw.main_process_ip,
            "main_process_port": hw.main_process_port,
            "rdzv_backend": hw.rdzv_backend,
            "context_parallel_size": s.context_parallel.size,
            "data_parallel_size": plan.data_parallel_size,
        },
        "artefacts": {name: sha256(text) for name, text in sorted(artefacts.items())},
        "versions": dict(versions) if versions is not None else tool_versions(),  # the compile's inputs
        "diagnostics": [
            {"severity": d.severity, "key": d.key, "message": d.message} for d in diags.items if d.severity != "error"
        ],
    }
