"""Key paths (``"fsdp.version"``) as constants, derived from the declaration.

Production code that names a key by its path (a diagnostic's key, `explicit` checks, the
key whose accelerate name emit writes) uses these instead of a string literal. Each is
made by `key` from an attribute read on the typed settings, so a key renamed in its
declaration (`compiler/keys/sections/`) is seen twice: by mypy (the attribute no longer exists on
`Settings`) and at import (`key` refuses a path that is not declared). A new constant is
one line here, named ``SECTION_KEY``. Outside compiler/keys/, a string literal that is exactly a
key path fails tests/compiler/test_key_constants.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Final

from .settings import Settings

__all__ = ["DECLARED", "key"]


def _declared_paths() -> frozenset[str]:
    out: set[str] = set()
    for section in dataclasses.fields(Settings):
        cls: Any = section.default_factory
        out.update(f"{section.name}.{f.name}" for f in dataclasses.fields(cls))
    return frozenset(out)


#: Every declared key path.
DECLARED: Final = _declared_paths()


class _Reads:
    """Records the attribute names read on it (``_Reads().fsdp.version`` holds ``("fsdp",
    "version")``); its one attribute of its own is a name no key can have."""

    def __init__(self, parts: tuple[str, ...] = ()) -> None:
        self.__parts = parts

    def __getattr__(self, name: str) -> _Reads:
        return _Reads((*self.__parts, name))


def _path(reads: _Reads) -> str:
    parts: tuple[str, ...] = object.__getattribute__(reads, "_Reads__parts")  # __parts, name-mangled
    return ".".join(parts)


def key(read: Callable[[Settings], object]) -> str:
    """The path of the key that `read` reads: ``key(lambda s: s.fsdp.version) == "fsdp.version"``.
    mypy checks the attribute names against the declaration; a path that is not a declared
    key raises LookupError (at import, where the constants are made)."""
    got = read(_Reads())  # type: ignore[arg-type]  # a recorder standing in for the settings
    path = _path(got) if isinstance(got, _Reads) else ""
    if path not in DECLARED:
        raise LookupError(f"{path or read!r} is not a declared settings key (compiler/keys/sections/)")
    return path


MODEL_FAMILY: Final = key(lambda s: s.model.family)
MODEL_FLAVOUR: Final = key(lambda s: s.model.flavour)
MODEL_PATH: Final = key(lambda s: s.model.path)
MODEL_TYPE: Final = key(lambda s: s.model.type)
MODEL_BASE_PRECISION: Final = key(lambda s: s.model.base_precision)
MODEL_LORA_RANK: Final = key(lambda s: s.model.lora_rank)
MODEL_LORA_ALPHA: Final = key(lambda s: s.model.lora_alpha)
MODEL_LORA_DROPOUT: Final = key(lambda s: s.model.lora_dropout)
MODEL_LORA_TARGET_MODULES: Final = key(lambda s: s.model.lora_target_modules)
MODEL_POOLING: Final = key(lambda s: s.model.pooling)
MODEL_MRL_DIMS: Final = key(lambda s: s.model.mrl_dims)
MODEL_TEMPERATURE: Final = key(lambda s: s.model.temperature)
DATA_PATH: Final = key(lambda s: s.data.path)
DATA_VALIDATION_PATH: Final = key(lambda s: s.data.validation_path)
DATA_VALIDATION_SPLIT: Final = key(lambda s: s.data.validation_split)
DATA_SEQ_LEN: Final = key(lambda s: s.data.seq_len)
DATA_RESOLUTION: Final = key(lambda s: s.data.resolution)
DATA_NUM_WORKERS: Final = key(lambda s: s.data.num_workers)
DATA_SPLIT: Final = key(lambda s: s.data.split)
DATA_STREAMING: Final = key(lambda s: s.data.streaming)
DATA_FORMAT: Final = key(lambda s: s.data.format)
DATA_TEXT_COLUMN: Final = key(lambda s: s.data.text_column)
DATA_MESSAGES_COLUMN: Final = key(lambda s: s.data.messages_column)
DATA_CHAT_TEMPLATE: Final = key(lambda s: s.data.chat_template)
DATA_PACKING: Final = key(lambda s: s.data.packing)
DATA_CAPTION_DROPOUT: Final = key(lambda s: s.data.caption_dropout)
DATA_COMPLETION_ONLY_LOSS: Final = key(lambda s: s.data.completion_only_loss)
HARDWARE_PLATFORM: Final = key(lambda s: s.hardware.platform)
HARDWARE_NUM_PROCESSES: Final = key(lambda s: s.hardware.num_processes)
HARDWARE_NUM_MACHINES: Final = key(lambda s: s.hardware.num_machines)
HARDWARE_MACHINE_RANK: Final = key(lambda s: s.hardware.machine_rank)
HARDWARE_MAIN_PROCESS_IP: Final = key(lambda s: s.hardware.main_process_ip)
HARDWARE_MAIN_PROCESS_PORT: Final = key(lambda s: s.hardware.main_process_port)
HARDWARE_GPU_IDS: Final = key(lambda s: s.hardware.gpu_ids)
HARDWARE_RDZV_BACKEND: Final = key(lambda s: s.hardware.rdzv_backend)
HARDWARE_SAME_NETWORK: Final = key(lambda s: s.hardware.same_network)
HARDWARE_GPU_MEMORY_GIB: Final = key(lambda s: s.hardware.gpu_memory_gib)
HARDWARE_HOST_MEMORY_GIB: Final = key(lambda s: s.hardware.host_memory_gib)
FSDP_ENABLED: Final = key(lambda s: s.fsdp.enabled)
FSDP_VERSION: Final = key(lambda s: s.fsdp.version)
FSDP_RESHARD_AFTER_FORWARD: Final = key(lambda s: s.fsdp.reshard_after_forward)
FSDP_CPU_RAM_EFFICIENT_LOADING: Final = key(lambda s: s.fsdp.cpu_ram_efficient_loading)
FSDP_AUTO_WRAP_POLICY: Final = key(lambda s: s.fsdp.auto_wrap_policy)
FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP: Final = key(lambda s: s.fsdp.transformer_layer_cls_to_wrap)
FSDP_MIN_NUM_PARAMS: Final = key(lambda s: s.fsdp.min_num_params)
FSDP_OFFLOAD_PARAMS: Final = key(lambda s: s.fsdp.offload_params)
FSDP_ACTIVATION_CHECKPOINTING: Final = key(lambda s: s.fsdp.activation_checkpointing)
FSDP_SHARDING_STRATEGY: Final = key(lambda s: s.fsdp.sharding_strategy)
FSDP_FORWARD_PREFETCH: Final = key(lambda s: s.fsdp.forward_prefetch)
FSDP_BACKWARD_PREFETCH: Final = key(lambda s: s.fsdp.backward_prefetch)
FSDP_USE_ORIG_PARAMS: Final = key(lambda s: s.fsdp.use_orig_params)
FSDP_SYNC_MODULE_STATES: Final = key(lambda s: s.fsdp.sync_module_states)
DEEPSPEED_ENABLED: Final = key(lambda s: s.deepspeed.enabled)
DEEPSPEED_CONFIG: Final = key(lambda s: s.deepspeed.config)
DEEPSPEED_ZERO_STAGE: Final = key(lambda s: s.deepspeed.zero_stage)
DEEPSPEED_NVME_PATH: Final = key(lambda s: s.deepspeed.nvme_path)
DEEPSPEED_OPTIMIZER: Final = key(lambda s: s.deepspeed.optimizer)
DEEPSPEED_GRADIENT_CLIPPING: Final = key(lambda s: s.deepspeed.gradient_clipping)
DEEPSPEED_ZERO3_INIT: Final = key(lambda s: s.deepspeed.zero3_init)
DEEPSPEED_GATHER_16BIT_WEIGHTS_ON_MODEL_SAVE: Final = key(lambda s: s.deepspeed.gather_16bit_weights_on_model_save)
DEEPSPEED_OFFLOAD_OPTIMIZER: Final = key(lambda s: s.deepspeed.offload_optimizer)
DEEPSPEED_OFFLOAD_PARAM: Final = key(lambda s: s.deepspeed.offload_param)
DEEPSPEED_SCHEDULER: Final = key(lambda s: s.deepspeed.scheduler)
DEEPSPEED_BUFFER_SIZE: Final = key(lambda s: s.deepspeed.buffer_size)
DEEPSPEED_PIN_MEMORY: Final = key(lambda s: s.deepspeed.pin_memory)
CONTEXT_PARALLEL_SIZE: Final = key(lambda s: s.context_parallel.size)
CONTEXT_PARALLEL_COMM_STRATEGY: Final = key(lambda s: s.context_parallel.comm_strategy)
CONTEXT_PARALLEL_SP_SIZE: Final = key(lambda s: s.context_parallel.sp_size)
CONTEXT_PARALLEL_SP_BACKEND: Final = key(lambda s: s.context_parallel.sp_backend)
CONTEXT_PARALLEL_SP_SEQ_LENGTH_IS_VARIABLE: Final = key(lambda s: s.context_parallel.sp_seq_length_is_variable)
CONTEXT_PARALLEL_SP_ATTN_IMPLEMENTATION: Final = key(lambda s: s.context_parallel.sp_attn_implementation)
CONTEXT_PARALLEL_STANDALONE: Final = key(lambda s: s.context_parallel.standalone)
TRAINING_MIXED_PRECISION: Final = key(lambda s: s.training.mixed_precision)
TRAINING_MICRO_BATCH_SIZE: Final = key(lambda s: s.training.micro_batch_size)
TRAINING_GRADIENT_ACCUMULATION_STEPS: Final = key(lambda s: s.training.gradient_accumulation_steps)
TRAINING_OPTIMIZER: Final = key(lambda s: s.training.optimizer)
TRAINING_OPTIMIZER_IN_BACKWARD: Final = key(lambda s: s.training.optimizer_in_backward)
TRAINING_NUM_EPOCHS: Final = key(lambda s: s.training.num_epochs)
TRAINING_MAX_GRAD_NORM: Final = key(lambda s: s.training.max_grad_norm)
TRAINING_CLIP_METHOD: Final = key(lambda s: s.training.clip_method)
TRAINING_LEARNING_RATE: Final = key(lambda s: s.training.learning_rate)
TRAINING_WEIGHT_DECAY: Final = key(lambda s: s.training.weight_decay)
TRAINING_LR_SCHEDULER: Final = key(lambda s: s.training.lr_scheduler)
TRAINING_WARMUP_STEPS: Final = key(lambda s: s.training.warmup_steps)
TRAINING_LR_END: Final = key(lambda s: s.training.lr_end)
TRAINING_LR_POWER: Final = key(lambda s: s.training.lr_power)
TRAINING_WARMUP_RATIO: Final = key(lambda s: s.training.warmup_ratio)
TRAINING_MAX_STEPS: Final = key(lambda s: s.training.max_steps)
TRAINING_GRADIENT_CHECKPOINTING: Final = key(lambda s: s.training.gradient_checkpointing)
TRAINING_SEED: Final = key(lambda s: s.training.seed)
TRAINING_LOG_EVERY: Final = key(lambda s: s.training.log_every)
TRAINING_EMA: Final = key(lambda s: s.training.ema)
TRAINING_SNR_GAMMA: Final = key(lambda s: s.training.snr_gamma)
TRAINING_FLOW_SHIFT: Final = key(lambda s: s.training.flow_shift)
TRAINING_FLOW_AUTO_SHIFT: Final = key(lambda s: s.training.flow_auto_shift)
TRAINING_TIMESTEP_SAMPLING: Final = key(lambda s: s.training.timestep_sampling)
TRAINING_EMA_DECAY: Final = key(lambda s: s.training.ema_decay)
TRAINING_EMA_DEVICE: Final = key(lambda s: s.training.ema_device)
CHECKPOINT_STATE_DICT_TYPE: Final = key(lambda s: s.checkpoint.state_dict_type)
CHECKPOINT_EVERY_STEPS: Final = key(lambda s: s.checkpoint.every_steps)
CHECKPOINT_EVERY_EPOCHS: Final = key(lambda s: s.checkpoint.every_epochs)
CHECKPOINT_KEEP_LAST: Final = key(lambda s: s.checkpoint.keep_last)
CHECKPOINT_RESUME: Final = key(lambda s: s.checkpoint.resume)
OUTPUT_DIR: Final = key(lambda s: s.output.dir)
ACCELERATE_BASE: Final = key(lambda s: s.accelerate.base)
ACCELERATE_PARALLELISM_CONFIG: Final = key(lambda s: s.accelerate.parallelism_config)
ACCELERATE_DYNAMO_BACKEND: Final = key(lambda s: s.accelerate.dynamo_backend)
LOGGING_LOG_WITH: Final = key(lambda s: s.logging.log_with)
LOGGING_PROJECT: Final = key(lambda s: s.logging.project)
LOGGING_DIR: Final = key(lambda s: s.logging.dir)
