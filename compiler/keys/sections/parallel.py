"""Declared settings: how the model is sharded: FSDP, DeepSpeed ZeRO, context parallelism.

Each field is one key, declared once with `setting` (see `compiler/keys/declare.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .. import spellings
from ..choices import (
    BackwardPrefetch,
    CommStrategy,
    DeepspeedScheduler,
    FsdpVersion,
    OffloadDevice,
    ShardingStrategy,
    SpBackend,
    ZeroStage,
)
from ..declare import setting


@dataclass(frozen=True)
class FsdpSettings:
    """Fully Sharded Data Parallel (torch FSDP2, or the deprecated v1)."""

    title: ClassVar[str] = "FSDP"
    step: ClassVar[str] = "sharding"
    enabled: bool = setting(
        False, aliases=("fsdp_enable", "use_fsdp"),
        help="Shard parameters, gradients and optimizer state with FSDP.")
    version: FsdpVersion = setting(
        2, aliases=("fsdp_version",), spellings=spellings.fsdp_version,
        accelerate=("fsdp_config.fsdp_version",),
        help="FSDP version: 2 (DTensor, per-parameter sharding) or 1 (flat parameters, deprecated).")
    reshard_after_forward: bool = setting(
        True, aliases=("fsdp_reshard_after_forward",), accelerate=("fsdp_config.fsdp_reshard_after_forward",),
        order=0,
        help="Free gathered parameters after forward (less memory, more communication); needed for "
             "validation on sharded models.")
    cpu_ram_efficient_loading: bool = setting(
        False, aliases=("fsdp_cpu_ram_efficient_loading",),
        accelerate=("fsdp_config.fsdp_cpu_ram_efficient_loading",), step="checkpoints", order=3,
        help="Load weights on rank 0 only and broadcast, to cap host RAM on load and resume.")
    auto_wrap_policy: str = setting(
        "transformer", aliases=("fsdp_auto_wrap_policy",), spellings=spellings.wrap_policy,
        accelerate=("fsdp_config.fsdp_auto_wrap_policy",),
        accelerate_values={"transformer": "TRANSFORMER_BASED_WRAP", "size": "SIZE_BASED_WRAP", "none": "NO_WRAP"},
        order=2,
        help="How modules are wrapped: transformer (by class), size (by parameter count), none, or a "
             "dotted path to a callable.")
    transformer_layer_cls_to_wrap: list[str] = setting(
        [], aliases=("fsdp_transformer_layer_cls_to_wrap",),
        accelerate=("fsdp_config.fsdp_transformer_layer_cls_to_wrap",), order=3,
        help="Module classes wrapped as units with the transformer policy; empty uses the model's "
             "_no_split_modules. `tuner blocks MODEL` suggests them.")
    min_num_params: int = setting(
        100000000, aliases=("fsdp_min_num_params",), minimum=1,
        accelerate=("fsdp_config.fsdp_min_num_params",), order=4,
        help="Parameter threshold for the size policy.")
    offload_params: bool = setting(
        False, aliases=("fsdp_offload_params",), accelerate=("fsdp_config.fsdp_offload_params",),
        order=1,
        help="Keep parameters (and optimizer state) on CPU between uses.")
    activation_checkpointing: bool = setting(
        False, aliases=("fsdp_activation_checkpointing",),
        accelerate=("fsdp_config.fsdp_activation_checkpointing",), order=6,
        help="FSDP-native activation checkpointing of the wrapped blocks.")
    sharding_strategy: ShardingStrategy = setting(
        "full_shard", aliases=("fsdp_sharding_strategy",),
        accelerate=("fsdp_config.fsdp_sharding_strategy",), order=5,
        help="FSDP v1 sharding strategy (v2 uses reshard_after_forward).")
    forward_prefetch: bool | None = setting(
        None, aliases=("fsdp_forward_prefetch",), accelerate=("fsdp_config.fsdp_forward_prefetch",),
        help="FSDP v1: prefetch the next all-gather during forward (accelerate's fsdp_forward_prefetch). "
             "Unset: accelerate's default (off).")
    backward_prefetch: BackwardPrefetch | None = setting(
        None, aliases=("fsdp_backward_prefetch",),
        accelerate=("fsdp_config.fsdp_backward_prefetch",),
        help="FSDP v1 backward prefetch (accelerate's fsdp_backward_prefetch). Unset: BACKWARD_PRE.")
    use_orig_params: bool | None = setting(
        None, aliases=("fsdp_use_orig_params",), accelerate=("fsdp_config.fsdp_use_orig_params",),
        help="FSDP v1 use_orig_params (accelerate's fsdp_use_orig_params); QLoRA configs set it to false. "
             "Unset: true (accelerate's launch default; LoRA needs it).")
    sync_module_states: bool | None = setting(
        None, aliases=("fsdp_sync_module_states",), accelerate=("fsdp_config.fsdp_sync_module_states",),
        help="FSDP: broadcast rank 0's weights at wrap time (accelerate's fsdp_sync_module_states). Unset:"
             " follows cpu_ram_efficient_loading (accelerate forces it on with RAM-efficient loading).")


@dataclass(frozen=True)
class DeepspeedSettings:
    """DeepSpeed ZeRO. Either builder fields, or a raw config in DeepSpeed's own JSON structure (an inline
    table or a path to a .json file), which wins where both say something."""

    title: ClassVar[str] = "DeepSpeed"
    step: ClassVar[str] = "sharding"
    enabled: bool = setting(
        False, aliases=("use_deepspeed",),
        help="Use DeepSpeed ZeRO (implied by deepspeed.config).")
    config: dict[str, Any] | str = setting(
        {}, aliases=("deepspeed_config",),
        help="A raw DeepSpeed config: an inline table in DeepSpeed's JSON structure, or a path to a JSON "
             "file (relative to the settings file).")
    zero_stage: ZeroStage = setting(
        2, aliases=("zero_stage",), accelerate=("deepspeed_config.zero_stage",),
        order=7,
        help="ZeRO stage: 1 shards optimizer state, 2 also gradients, 3 also parameters.")
    offload_optimizer: OffloadDevice = setting(
        "none", aliases=("offload_optimizer_device",),
        spellings=spellings.offload, accelerate=("deepspeed_config.offload_optimizer_device",),
        order=8,
        help="Where optimizer state lives.")
    offload_param: OffloadDevice = setting(
        "none", aliases=("offload_param_device",),
        spellings=spellings.offload, accelerate=("deepspeed_config.offload_param_device",),
        order=9,
        help="Where parameters live between uses (ZeRO-3 only).")
    nvme_path: str = setting(
        "", aliases=("offload_param_path",),
        accelerate=("deepspeed_config.offload_param_nvme_path", "deepspeed_config.offload_optimizer_nvme_path"),
        order=10,
        help="Directory for NVMe offload swap files; must exist, be writable and have room.")
    optimizer: str = setting(
        "AdamW", aliases=("deepspeed_optimizer",),
        help="DeepSpeed optimizer type. cpuadam and fusedadam are replaced by AdamW. Written to "
             "deepspeed.json only when set (or for ZeRO-Offload); otherwise tuner run builds "
             "training.optimizer in code.")
    scheduler: DeepspeedScheduler = setting(
        "WarmupLR", aliases=("deepspeed_scheduler",),
        help="DeepSpeed LR scheduler type. Written to deepspeed.json only when set, and then it replaces "
             "training.lr_scheduler.")
    gradient_clipping: float = setting(
        1.0, aliases=("gradient_clipping",), minimum=0, accelerate=("deepspeed_config.gradient_clipping",),
        help="Clip the global gradient norm to this (0 disables).")
    zero3_init: bool = setting(
        False, aliases=("zero3_init_flag",), accelerate=("deepspeed_config.zero3_init_flag",),
        help="Construct the model with deepspeed.zero.Init under ZeRO-3.")
    gather_16bit_weights_on_model_save: bool = setting(
        True, aliases=("zero3_save_16bit_model",), accelerate=("deepspeed_config.zero3_save_16bit_model",),
        help="ZeRO-3: gather full weights when saving the model.")
    buffer_size: int = setting(
        0, aliases=("nvme_buffer_size",), minimum=0,
        help="NVMe parameter buffer size in elements; 0 chooses one from the model size.")
    pin_memory: bool = setting(
        True, aliases=("offload_pin_memory",),
        help="Pin host memory used for offload.")


@dataclass(frozen=True)
class ContextParallelSettings:
    """Context (sequence) parallelism: ring CP on top of FSDP2 (size), or Ulysses sequence
    parallelism under DeepSpeed (sp_*); CUDA only."""

    title: ClassVar[str] = "Context parallel"
    step: ClassVar[str] = "sharding"
    size: int = setting(
        1, aliases=("context_parallel_size",), minimum=1,
        accelerate=("parallelism_config.parallelism_config_cp_size",), order=11,
        help="Ranks that split the sequence dimension; 1 disables it.")
    comm_strategy: CommStrategy = setting(
        "allgather", aliases=("context_parallel_comm_strategy",),
        spellings=spellings.COMM, accelerate=("parallelism_config.parallelism_config_cp_comm_strategy",),
        order=12,
        help="Rotation: allgather (overlap, the default) or alltoall.")
    sp_size: int = setting(
        1, aliases=("sequence_parallel_size", "sp_size"), minimum=1,
        accelerate=("parallelism_config.parallelism_config_sp_size",), order=13,
        help="Ulysses sequence parallelism (accelerate's sp, run by DeepSpeed): ranks that split each sequence by "
             "attention heads; 1 disables it. Needs DeepSpeed; not together with context_parallel.size.")
    sp_backend: SpBackend = setting(
        "deepspeed", aliases=("sp_backend",),
        accelerate=("parallelism_config.parallelism_config_sp_backend",), order=14,
        help="Who runs Ulysses sequence parallelism (accelerate 1.15 knows deepspeed only).")
    sp_seq_length_is_variable: bool = setting(
        True, aliases=("sp_seq_length_is_variable",),
        accelerate=("parallelism_config.parallelism_config_sp_seq_length_is_variable",), order=15,
        help="Batches may change sequence length (accelerate's default); false needs a fixed length.")
    sp_attn_implementation: str = setting(
        "sdpa", aliases=("sp_attn_implementation",),
        accelerate=("parallelism_config.parallelism_config_sp_attn_implementation",), order=16,
        help="Attention kernel under Ulysses: sdpa (accelerate's default), flash_attention_2, flash_attention_3, "
             "or a hub kernel name.")
    standalone: bool = setting(
        False, aliases=("context_parallel_standalone",),
        help="Context parallelism applied by the training script itself, without FSDP (SimpleTuner's "
             "standalone CP). accelerate 1.15 runs cp_size > 1 only with an FSDP2 plugin, so the "
             "accelerate config is a plain multi-GPU launch and the size is recorded in the manifest for "
             "the script; tuner run does not train it.")
