"""Declared settings: the optimisation loop and its checkpoints.

Each field is one key, declared once with `setting` (see `compiler/keys/declare.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .. import spellings
from ..choices import ClipMethod, EmaDevice, LrScheduler, MixedPrecision, Optimizer, StateDictType, TimestepSampling
from ..declare import setting


@dataclass(frozen=True)
class TrainingSettings:
    """The optimisation loop."""

    title: ClassVar[str] = "Training"
    step: ClassVar[str] = "precision"
    mixed_precision: MixedPrecision = setting(
        "no", aliases=("mixed_precision",), spellings=spellings.precision,
        accelerate=("mixed_precision",), order=0,
        help="Mixed precision.")
    micro_batch_size: int = setting(
        1,
        aliases=("train_batch_size", "batch_size", "per_device_train_batch_size", "train_micro_batch_size_per_gpu"),
        minimum=1, order=1,
        help="Samples per rank per forward pass.")
    gradient_accumulation_steps: int = setting(
        1, aliases=("gradient_accumulation_steps",), minimum=1,
        accelerate=("deepspeed_config.gradient_accumulation_steps",), order=2,
        help="Micro-batches accumulated before each optimizer step.")
    learning_rate: float = setting(
        0.0001, aliases=("learning_rate", "lr"), exclusive_minimum=0, order=3,
        help="Peak learning rate.")
    optimizer: Optimizer = setting(
        "adamw", aliases=("optimizer", "optim"),
        spellings=spellings.optimizer, order=6,
        help="Optimizer for non-DeepSpeed runs (lion needs the lion-pytorch package, prodigy prodigyopt).")
    optimizer_in_backward: bool = setting(
        False, aliases=("optimizer_in_bwd", "optimizer_release_gradients"),
        help="Your own trainer steps the optimizer inside backward, in gradient hooks (torchtune's "
             "optimizer_in_bwd, SimpleTuner's optimizer_release_gradients). Compiles for your own trainer "
             "(the compiler checks it against FSDP2 CPU offload); tuner run refuses it.")
    weight_decay: float = setting(
        0.0, aliases=("weight_decay", "adam_weight_decay"), minimum=0,
        help="Weight decay.")
    lr_scheduler: LrScheduler = setting(
        "constant", aliases=("lr_scheduler",), order=7,
        help="LR schedule (transformers.get_scheduler's names).")
    lr_end: float = setting(
        1e-7, aliases=("lr_end",), minimum=0,
        help="The polynomial schedule's final learning rate (transformers' lr_end; SimpleTuner's lr_end).")
    lr_power: float = setting(
        1.0, aliases=("lr_power",), exclusive_minimum=0,
        help="The polynomial schedule's power (transformers' power: 1.0 is linear; SimpleTuner's default is 0.8).")
    warmup_steps: int = setting(
        0, aliases=("lr_warmup_steps", "warmup_steps"), minimum=0, order=5,
        help="Linear warmup steps.")
    warmup_ratio: float = setting(
        0.0, aliases=("warmup_ratio", "lr_warmup_ratio"), minimum=0, maximum=1,
        help="Warmup as a fraction of the training steps (used when warmup_steps is 0).")
    max_steps: int = setting(
        20, aliases=("max_train_steps", "max_steps"), minimum=0, order=4,
        help="Optimizer steps to train (0: use num_epochs).")
    num_epochs: int = setting(
        1, aliases=("num_train_epochs", "epochs"), minimum=0,
        help="Epochs when max_steps is 0 (0 with max_steps > 0: steps decide, SimpleTuner's spelling).")
    max_grad_norm: float = setting(
        1.0, aliases=("max_grad_norm",), minimum=0,
        help="Clip the global gradient norm (0 disables).")
    clip_method: ClipMethod = setting(
        "norm", aliases=("grad_clip_method", "clip_method"),
        help="How max_grad_norm clips: the global norm, or each gradient value (value: not with DeepSpeed).")
    gradient_checkpointing: bool = setting(
        False, aliases=("gradient_checkpointing",), order=8,
        help="Recompute activations in backward to save memory.")
    seed: int = setting(
        42, aliases=("seed",), minimum=0,
        help="Random seed (data order, init, dropout).")
    validation_every: int = setting(
        0, aliases=("validation_steps", "eval_steps"), minimum=0,
        help="Run validation every N optimizer steps (0: only at the end).")
    log_every: int = setting(
        1, aliases=("logging_steps",), minimum=1,
        help="Write metrics every N optimizer steps.")
    tensorboard: bool = setting(
        False, aliases=("tensorboard",),
        help="Also write TensorBoard event files (the same as naming tensorboard in logging.log_with).")
    ema: bool = setting(
        False, aliases=("use_ema",),
        help="Keep an exponential moving average of the trained weights.")
    ema_decay: float = setting(
        0.999, aliases=("ema_decay",), minimum=0, maximum=1,
        help="EMA decay.")
    ema_device: EmaDevice = setting(
        "cpu", aliases=("ema_device",),
        help="Where EMA shadows live (the seed's default is CPU).")
    # -- issue 35: diffusion objectives (runtime/families/diffusion/objectives.py) ----------
    flow_shift: float = setting(
        1.0, aliases=("flow_schedule_shift",), minimum=0.01,
        help="Diffusion, flow matching: the timestep shift (sigma -> shift*s/(1+(shift-1)*s)); SD3 trains at 3.0.")
    flow_auto_shift: bool = setting(
        False, aliases=("flow_schedule_auto_shift",),
        help="Diffusion, flow matching: resolution-dependent shift (Flux's: larger buckets train noisier); "
             "replaces flow_shift.")
    timestep_sampling: TimestepSampling = setting(
        "uniform", aliases=("flow_timestep_sampling",),
        help="Diffusion, flow matching: how training sigmas are drawn: uniform, or logit_normal (SD3's).")
    logit_mean: float = setting(
        0.0, aliases=("flow_logit_mean",),
        help="Diffusion: the mean of timestep_sampling = \"logit_normal\".")
    logit_std: float = setting(
        1.0, aliases=("flow_logit_std",), minimum=0.01,
        help="Diffusion: the standard deviation of timestep_sampling = \"logit_normal\".")
    snr_gamma: float = setting(
        0.0, aliases=("snr_gamma",), minimum=0,
        help="Diffusion, epsilon / v-prediction: min-SNR-gamma loss weighting (5.0 is usual; 0 off).")
    noise_offset: float = setting(
        0.0, aliases=("noise_offset",), minimum=0,
        help="Diffusion: noise offset (a per-channel constant added to the noise; 0.05-0.1 is usual; 0 off).")


@dataclass(frozen=True)
class CheckpointSettings:
    """Saving, resuming and exporting."""

    title: ClassVar[str] = "Checkpoints"
    step: ClassVar[str] = "checkpoints"
    state_dict_type: StateDictType = setting(
        "sharded", aliases=("fsdp_state_dict_type",),
        spellings=spellings.STATE_DICT, accelerate=("fsdp_config.fsdp_state_dict_type",),
        accelerate_values={"sharded": "SHARDED_STATE_DICT", "full": "FULL_STATE_DICT"},
        order=0,
        help="Checkpoint format: sharded (each rank writes its shard) or full (gathered on rank 0).")
    every_steps: int = setting(
        0, aliases=("checkpointing_steps", "save_steps"), minimum=0, order=1,
        help="Save a checkpoint every N optimizer steps (0: never during training).")
    every_epochs: int = setting(
        0, minimum=0,
        help="Save a checkpoint at the end of every N epochs (0: never; beside every_steps, both apply). "
             "The HF Trainer's save_strategy \"epoch\" is 1.")
    keep_last: int = setting(
        3, aliases=("checkpoints_total_limit",), minimum=1, order=2,
        help="Checkpoints kept; older ones are deleted.")
    resume: str = setting(
        "", aliases=("resume_from_checkpoint",), order=4,
        help="'' (fresh start), 'latest', 'auto' (resume the latest checkpoint when output.dir holds a run, "
             "else start fresh), or a checkpoint directory.")
    export: bool = setting(
        True, aliases=("export_model",), order=5,
        help="Export a full model (safetensors + config) that from_pretrained loads at the end.")
