"""Typed, resolved settings: what the compiler hands to the runtime and the wizard.

One dataclass per section of `schemas/settings.schema.json`. The schema is the declaration
(types, enums, defaults, help); these classes give the rest of tuner typed access to a
resolved settings dict (``Settings.from_dict(manifest["settings"])``).
`tests/unit/test_schema_drift.py` fails when the two disagree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

@dataclass
class ModelSettings:
    """What is trained."""
    family: str = 'causal_lm'
    flavour: str = ''
    path: str = 'builtin'
    type: str = 'full'
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_dropout: float = 0.0
    lora_target_modules: list[str] = field(default_factory=list)
    pooling: str = 'mean'
    mrl_dims: list[int] = field(default_factory=list)
    temperature: float = 0.05

@dataclass
class DataSettings:
    """Training data."""
    path: str = 'builtin'
    validation_path: str = ''
    validation_split: float = 0.1
    seq_len: int = 128
    resolution: int = 32
    num_workers: int = 0

@dataclass
class HardwareSettings:
    """Where the run happens: target platform and topology."""
    platform: str = 'auto'
    num_processes: int = 1
    num_machines: int = 1
    machine_rank: int = 0
    main_process_ip: str = ''
    main_process_port: int = 29500
    rdzv_backend: str = 'static'
    same_network: bool = True
    gpu_ids: str = 'all'
    gpu_memory_gib: float = 0.0
    host_memory_gib: float = 0.0

@dataclass
class FsdpSettings:
    """Fully Sharded Data Parallel (torch FSDP2, or the deprecated v1)."""
    enabled: bool = False
    version: int = 2
    reshard_after_forward: bool = True
    cpu_ram_efficient_loading: bool = False
    auto_wrap_policy: str = 'transformer'
    transformer_layer_cls_to_wrap: list[str] = field(default_factory=list)
    min_num_params: int = 100000000
    offload_params: bool = False
    activation_checkpointing: bool = False
    sharding_strategy: str = 'full_shard'
    # None: unset, accelerate's own default applies (see the schema's descriptions).
    forward_prefetch: bool | None = None
    backward_prefetch: str | None = None
    use_orig_params: bool | None = None
    sync_module_states: bool | None = None

@dataclass
class DeepspeedSettings:
    """DeepSpeed ZeRO. Either builder fields, or a raw config in DeepSpeed's own JSON structure (an inline table or a path to a .json file), which wins where both say something."""
    enabled: bool = False
    config: dict[str, Any] | str = field(default_factory=dict)
    zero_stage: int = 2
    offload_optimizer: str = 'none'
    offload_param: str = 'none'
    nvme_path: str = ''
    optimizer: str = 'AdamW'
    scheduler: str = 'WarmupLR'
    gradient_clipping: float = 1.0
    zero3_init: bool = False
    gather_16bit_weights_on_model_save: bool = True
    buffer_size: int = 0
    pin_memory: bool = True

@dataclass
class ContextParallelSettings:
    """Context (sequence) parallelism on top of FSDP2, CUDA only."""
    size: int = 1
    comm_strategy: str = 'allgather'
    standalone: bool = False

@dataclass
class TrainingSettings:
    """The optimisation loop."""
    mixed_precision: str = 'no'
    micro_batch_size: int = 1
    gradient_accumulation_steps: int = 1
    learning_rate: float = 0.0001
    optimizer: str = 'adamw'
    weight_decay: float = 0.0
    lr_scheduler: str = 'constant'
    warmup_steps: int = 0
    max_steps: int = 20
    num_epochs: int = 1
    max_grad_norm: float = 1.0
    gradient_checkpointing: bool = False
    seed: int = 42
    validation_every: int = 0
    log_every: int = 1
    tensorboard: bool = False
    ema: bool = False
    ema_decay: float = 0.999
    ema_device: str = 'cpu'

@dataclass
class CheckpointSettings:
    """Saving, resuming and exporting."""
    state_dict_type: str = 'sharded'
    every_steps: int = 0
    keep_last: int = 3
    resume: str = ''
    export: bool = True

@dataclass
class OutputSettings:
    """Where results go."""
    dir: str = 'output'

@dataclass
class AccelerateSettings:
    """How the accelerate config is produced."""
    base: str = ''
    dynamo_backend: str = 'no'
    parallelism_config: dict[str, Any] = field(default_factory=dict)

@dataclass
class ClusterSettings:
    """How the job is started on several machines: a Slurm batch script or Kubernetes manifests beside the artefacts (launch.sh is always written for multi-machine builds)."""
    type: str = 'none'
    job_name: str = 'tuner'
    script: list[str] = field(default_factory=list)
    partition: str = ''
    time: str = ''
    account: str = ''
    image: str = ''
    namespace: str = 'default'


@dataclass
class Settings:
    """All sections; build one with `Settings.from_dict` from resolved settings."""

    model: ModelSettings = field(default_factory=ModelSettings)
    data: DataSettings = field(default_factory=DataSettings)
    hardware: HardwareSettings = field(default_factory=HardwareSettings)
    fsdp: FsdpSettings = field(default_factory=FsdpSettings)
    deepspeed: DeepspeedSettings = field(default_factory=DeepspeedSettings)
    context_parallel: ContextParallelSettings = field(default_factory=ContextParallelSettings)
    training: TrainingSettings = field(default_factory=TrainingSettings)
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    output: OutputSettings = field(default_factory=OutputSettings)
    accelerate: AccelerateSettings = field(default_factory=AccelerateSettings)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)

    @classmethod
    def from_dict(cls, data: dict[str, dict[str, Any]]) -> "Settings":
        kwargs = {}
        for f in fields(cls):
            section_cls = f.default_factory  # type: ignore[misc]
            kwargs[f.name] = section_cls(**data.get(f.name, {}))
        return cls(**kwargs)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return asdict(self)
