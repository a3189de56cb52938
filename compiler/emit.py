"""Emitters: accelerate YAML, DeepSpeed JSON and the manifest (written by compiler/build_writer.py).

Every accelerate key is written explicitly, because accelerate's launch defaults are
surprising (FSDP version 1, RAM-efficient loading on). When the YAML points at a DeepSpeed
JSON file it carries none of the keys accelerate forbids beside one (checked in
`accelerate.utils.dataclasses.DeepSpeedPlugin._deepspeed_config_checks`), and no
top-level ``mixed_precision``: the JSON's bf16/fp16 blocks decide.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml

from .diagnostics import Diagnostics
from .inputs import tool_versions
from .rules import Plan
from .schema import index
from .settings import Settings

ACCELERATE_YAML = "accelerate.yaml"
DEEPSPEED_JSON = "deepspeed.json"
MANIFEST_JSON = "manifest.json"
MANIFEST_VERSION = 2  # 2: settings_file and deepspeed_config_file are relative paths

#: Keys accelerate refuses in `deepspeed_config` beside a `deepspeed_config_file`.
DS_KEYS_FORBIDDEN_WITH_FILE = (
    "gradient_accumulation_steps", "gradient_clipping", "zero_stage", "offload_optimizer_device",
    "offload_param_device", "offload_param_nvme_path", "offload_optimizer_nvme_path", "zero3_save_16bit_model",
)
#: accelerate's spelling of tuner's values, declared with the keys (``accelerate_values=``).
_WRAP_NAMES = index().keys["fsdp.auto_wrap_policy"].setting.accelerate_values or {}
_STATE_DICT_NAMES = index().keys["checkpoint.state_dict_type"].setting.accelerate_values or {}


def fsdp_block(s: Settings) -> dict[str, Any]:
    f = s.fsdp
    policy = _WRAP_NAMES.get(f.auto_wrap_policy, "NO_WRAP")  # a dotted callable is applied by the runtime
    block: dict[str, Any] = {
        "fsdp_version": f.version,
        "fsdp_auto_wrap_policy": policy,
        "fsdp_state_dict_type": _STATE_DICT_NAMES[s.checkpoint.state_dict_type],
        "fsdp_cpu_ram_efficient_loading": f.cpu_ram_efficient_loading,
        # Broadcasting rank 0's weights is needed only when rank 0 alone loads them.
        "fsdp_sync_module_states": f.cpu_ram_efficient_loading,
        "fsdp_offload_params": f.offload_params,
        "fsdp_activation_checkpointing": f.activation_checkpointing,
    }
    if f.version == 2:
        block["fsdp_reshard_after_forward"] = f.reshard_after_forward
    else:
        strategy = f.sharding_strategy.upper()
        if not f.reshard_after_forward and strategy == "FULL_SHARD":
            strategy = "SHARD_GRAD_OP"
        block["fsdp_reshard_after_forward"] = strategy
        block["fsdp_use_orig_params"] = True
        block["fsdp_backward_prefetch"] = "BACKWARD_PRE"
        block["fsdp_forward_prefetch"] = False
    # Set explicitly (an imported config's own choice): written as given, for either version.
    for key in ("forward_prefetch", "backward_prefetch", "use_orig_params", "sync_module_states"):
        if getattr(f, key) is not None:
            block[f"fsdp_{key}"] = getattr(f, key)
    if policy == "TRANSFORMER_BASED_WRAP" and f.transformer_layer_cls_to_wrap:
        block["fsdp_transformer_layer_cls_to_wrap"] = ",".join(f.transformer_layer_cls_to_wrap)
    if policy == "SIZE_BASED_WRAP":
        block["fsdp_min_num_params"] = f.min_num_params
    return block


def accelerate_config(s: Settings, plan: Plan, deepspeed_path: str | None) -> dict[str, Any]:
    """`deepspeed_path` is written as given: relative to the project directory (where
    `accelerate launch --config_file build/accelerate.yaml` is run from)."""
    hw = s.hardware
    cfg: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": plan.distributed_type,
        "downcast_bf16": "no",
        "enable_cpu_affinity": False,
        "gpu_ids": hw.gpu_ids,
        "machine_rank": hw.machine_rank,
        "main_process_port": hw.main_process_port,
        "main_training_function": "main",
        "mixed_precision": s.training.mixed_precision,
        "num_machines": hw.num_machines,
        "num_processes": hw.num_processes,
        "rdzv_backend": hw.rdzv_backend,
        "same_network": hw.same_network,
        "tpu_env": [],
        "tpu_use_cluster": False,
        "tpu_use_sudo": False,
        "use_cpu": plan.platform == "cpu",
        "dynamo_config": {} if s.accelerate.dynamo_backend == "no" else {"dynamo_backend": s.accelerate.dynamo_backend.upper()},
    }
    if hw.num_machines > 1:
        cfg["main_process_ip"] = hw.main_process_ip
    if plan.uses_deepspeed:
        assert deepspeed_path is not None
        del cfg["mixed_precision"]
        cfg["deepspeed_config"] = {
            "deepspeed_config_file": deepspeed_path,
            "zero3_init_flag": bool(s.deepspeed.zero3_init and s.deepspeed.zero_stage == 3),
        }
        if hw.num_machines > 1:
            cfg["deepspeed_config"]["deepspeed_multinode_launcher"] = "standard"
    elif plan.uses_fsdp:
        cfg["fsdp_config"] = fsdp_block(s)
        if s.context_parallel.size > 1 and not s.context_parallel.standalone:
            cfg["parallelism_config"] = {
                "parallelism_config_cp_size": s.context_parallel.size,
                "parallelism_config_cp_comm_strategy": s.context_parallel.comm_strategy,
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
            "parallelism_config_sp_size": cp.sp_size,
            "parallelism_config_sp_backend": cp.sp_backend,
            "parallelism_config_sp_seq_length_is_variable": cp.sp_seq_length_is_variable,
            "parallelism_config_sp_attn_implementation": cp.sp_attn_implementation,
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
DECIDED_KEYS = frozenset({
    "distributed_type", "mixed_precision", "num_processes", "num_machines", "machine_rank", "main_process_ip",
    "main_process_port", "rdzv_backend", "same_network", "use_cpu", "fsdp_config", "deepspeed_config",
    "parallelism_config",
})


def merge_base(base: dict[str, Any], ours: dict[str, Any], plan: Plan, diags: Diagnostics) -> dict[str, Any]:
    """Our decisions over the user's existing accelerate config; their other keys survive."""
    ours = {k: v for k, v in ours.items() if k in DECIDED_KEYS or k not in base}
    merged = dict(base)
    strategy_blocks = ("deepspeed_config", "fsdp_config", "megatron_lm_config", "parallelism_config")
    for block in strategy_blocks:
        if block in merged and block not in ours:
            if merged[block]:
                diags.note("accelerate.base", f"dropped {block} from the base config: the run uses {plan.strategy}")
            del merged[block]
    for key, value in ours.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and key != "deepspeed_config":
            merged[key] = {**merged[key], **value}
        elif key == "deepspeed_config" and isinstance(merged.get(key), dict):
            kept = {k: v for k, v in merged[key].items() if k not in DS_KEYS_FORBIDDEN_WITH_FILE}
            dropped = sorted(set(merged[key]) - set(kept))
            if dropped:
                diags.note("accelerate.base", f"dropped {', '.join(dropped)} from the base deepspeed_config: "
                           "they now live in deepspeed.json (accelerate refuses them beside a config file)")
            merged[key] = {**kept, **value}
        else:
            if key in merged and merged[key] != value and key not in ("distributed_type",):
                diags.note("accelerate.base", f"{key}: {merged[key]!r} from the base config replaced by {value!r}")
            merged[key] = value
    if plan.uses_deepspeed:
        merged.pop("mixed_precision", None)
    return merged


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
