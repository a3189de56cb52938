"""Bytes per rank for one sharding strategy: model states, buffers, offload, loading.

The memory model, per rank (N = ranks that share the sharding, P = parameters, T =
trainable parameters, K = optimizer state bytes per trainable parameter, 8 for Adam):

=================  ==========  ===========  ===========  ==========
strategy           parameters  gradients    optimizer    fp32 master
=================  ==========  ===========  ===========  ==========
DDP                4P          4T           K·T          -
FSDP2 / FSDP1      4P/N        4T/N         K·T/N        -
ZeRO-1             b·P         b·T          K·T/N        4T/N
ZeRO-2             b·P         4T/N         K·T/N        4T/N
ZeRO-3             b·P/N       4T/N         K·T/N        4T/N
=================  ==========  ===========  ===========  ==========

accelerate's mixed precision keeps fp32 parameters (autocast), so DDP and FSDP hold 4
bytes per parameter whatever the precision; DeepSpeed holds the model in the compute dtype
(b = 2 for bf16/fp16, 4 for fp32) plus the fp32 master partition. These are the tensors
`tuner.runtime.memory.rank_state_bytes` measures on real ranks (the accuracy test in
tests/services compares the two). On top come: activations (`estimate_activations`),
communication and gather buffers (DDP buckets, FSDP's unsharded block and its prefetch,
ZeRO's reduce bucket, ZeRO-3 prefetch and persistent small parameters), and on GPUs the
CUDA context. CPU offload moves the state it names to host RAM, NVMe offload to disk.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..keys import paths as K
from ..keys.choices import MixedPrecision
from ..keys.settings import Settings
from ..plan.strategy import Strategy
from .activations import activation_bytes, activation_table
from .model import ModelSize, transformer_blocks
from .optimizer import RankOptimizers

GIB = 1024**3
#: CUDA context, cuBLAS workspace and allocator slack per GPU (a measured-on-A100 ballpark).
GPU_OVERHEAD_BYTES = int(1.0 * GIB)
#: Share of GPU memory kept free for the caching allocator's fragmentation and kernel
#: workspaces: a strategy fits only below (1 - GPU_MARGIN) of the GPU's memory.
GPU_MARGIN = 0.10
#: What one rank's process costs in host RAM besides model state (torch, CUDA libraries).
HOST_OVERHEAD_PER_RANK = int(1.5 * GIB)
#: DeepSpeed defaults that the estimate needs when the config does not say.
DS_REDUCE_BUCKET = 500_000_000
DS_PREFETCH_BUCKET = 50_000_000
DS_PERSISTENCE_THRESHOLD = 100_000

#: The strategies compared side by side, cheapest first (the order recommendations follow).
COMPARED = ("ddp", "zero1", "zero2", "fsdp2", "zero3", "zero2+offload", "fsdp2+offload",
            "zero3+offload", "zero3+nvme")
LABELS = {
    "single": "single process", "ddp": "DDP", "fsdp1": "FSDP v1", "fsdp2": "FSDP2",
    "fsdp2+offload": "FSDP2 + CPU offload", "zero0": "ZeRO-0", "zero1": "ZeRO-1", "zero2": "ZeRO-2",
    "zero2+offload": "ZeRO-2 + CPU optimizer", "zero3": "ZeRO-3",
    "zero3+offload": "ZeRO-3 + CPU offload", "zero3+nvme": "ZeRO-3 + NVMe offload",
}


# --- the strategy view of the settings ------------------------------------------------------

@dataclass
class StrategyOptions:
    """One strategy with the options that change its memory."""

    name: str
    world: int
    ranks_per_host: int
    shard: int
    """Ranks a ZeRO/FSDP shard group spans."""
    mixed_precision: MixedPrecision
    optimizer_bytes: int
    offload_optimizer: str = "none"
    offload_param: str = "none"
    """The devices as a raw DeepSpeed config may name them (the estimate runs on a config the compile refuses)."""
    reshard_after_forward: bool = True
    reduce_bucket: int = DS_REDUCE_BUCKET
    prefetch_bucket: int = DS_PREFETCH_BUCKET
    persistence_threshold: int = DS_PERSISTENCE_THRESHOLD
    overlap_comm: bool = False
    cpu_ram_efficient_loading: bool = False

    @property
    def deepspeed(self) -> bool:
        return Strategy(self.name).is_deepspeed

    @property
    def stage(self) -> int:
        stage = Strategy(self.name).zero_stage
        return -1 if stage is None else stage

    @property
    def fsdp(self) -> bool:
        return Strategy(self.name).is_fsdp


def base_strategy(name: str) -> Strategy:
    """The strategy of a compared row's name (``zero2+offload`` -> ZeRO-2)."""
    return Strategy(name.split("+")[0])


def _raw_zero(s: Settings) -> dict[str, Any]:
    raw = s.deepspeed.config if isinstance(s.deepspeed.config, dict) else {}
    zero = raw.get("zero_optimization", {})
    return zero if isinstance(zero, dict) else {}


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _num(value: Any, default: int) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def options_for(s: Settings, strategy: str, world: int, ranks_per_host: int, optimizers: RankOptimizers,
                chosen: bool = False) -> StrategyOptions:
    """The memory-relevant options of `strategy`, taken from the settings where they apply.

    For the settings' own strategy (``chosen=True``) the offload choices are the settings';
    a compared variant (``zero3``, ``zero3+offload``, ...) sets its own. `optimizers`: what the
    ranks build (`estimate.ranks_optimizers`, from the compiled deepspeed.json).
    """
    base = base_strategy(strategy)
    zero = _raw_zero(s)
    ds = s.deepspeed
    opts = StrategyOptions(name=base, world=world, ranks_per_host=ranks_per_host, shard=world,
                           mixed_precision=s.training.mixed_precision,
                           optimizer_bytes=optimizers.state_bytes(base.is_deepspeed))
    if base.is_deepspeed:
        # A raw block of the wrong type is a compile error; the estimate still must not crash.
        off_opt = str(_table(zero.get("offload_optimizer")).get("device", ds.offload_optimizer)).lower()
        off_par = str(_table(zero.get("offload_param")).get("device", ds.offload_param)).lower()
        opts.reduce_bucket = _num(zero.get("reduce_bucket_size"), DS_REDUCE_BUCKET)
        opts.prefetch_bucket = _num(zero.get("stage3_prefetch_bucket_size"), DS_PREFETCH_BUCKET)
        opts.persistence_threshold = _num(zero.get("stage3_param_persistence_threshold"), DS_PERSISTENCE_THRESHOLD)
        opts.overlap_comm = bool(zero.get("overlap_comm", base is Strategy.ZERO3))
        opts.cpu_ram_efficient_loading = bool(ds.zero3_init) and base is Strategy.ZERO3
        opts.offload_optimizer, opts.offload_param = off_opt, off_par
    elif base.is_fsdp:
        f = s.fsdp
        opts.reshard_after_forward = f.reshard_after_forward
        opts.cpu_ram_efficient_loading = f.cpu_ram_efficient_loading
        opts.offload_param = "cpu" if f.offload_params else "none"
        if base is Strategy.FSDP1:  # FSDP2 ignores sharding_strategy (it has reshard_after_forward)
            opts.reshard_after_forward = f.sharding_strategy in ("full_shard", "hybrid_shard") and f.reshard_after_forward
            if f.sharding_strategy == "no_shard":
                opts.shard = 1
            elif f.sharding_strategy == "hybrid_shard":
                opts.shard = max(1, ranks_per_host)
    if not chosen:
        if base.is_deepspeed:
            opts.offload_optimizer, opts.offload_param = {
                "zero2+offload": ("cpu", "none"), "zero3+offload": ("cpu", "cpu"),
                "zero3+nvme": ("nvme", "nvme")}.get(strategy, ("none", "none"))
        elif base.is_fsdp:
            opts.offload_param = "cpu" if strategy.endswith("+offload") else "none"
    if opts.stage in (0, 1, 2):
        opts.offload_param = "none"  # DeepSpeed offloads parameters at stage 3 only
    return opts


# --- the estimate ----------------------------------------------------------------------

@dataclass
class Bytes:
    """Bytes by kind of state. One instance per place: device, host RAM, NVMe (per rank)."""

    params: int = 0
    grads: int = 0
    optimizer: int = 0
    master: int = 0
    """fp32 master weights (DeepSpeed)."""
    activations: int = 0
    buffers: int = 0
    """Communication buckets, unsharded FSDP blocks, ZeRO-3 prefetch and persistent
    parameters, offload staging buffers."""
    overhead: int = 0

    @property
    def model_states(self) -> int:
        return self.params + self.grads + self.optimizer + self.master

    @property
    def total(self) -> int:
        return self.model_states + self.activations + self.buffers + self.overhead

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "model_states": self.model_states, "total": self.total}


@dataclass
class StrategyEstimate:
    name: str
    label: str
    device: Bytes
    """On each GPU (on a CPU-only run: what each rank holds in host RAM as its 'device')."""
    host: Bytes
    """Offloaded to host RAM, per rank."""
    nvme: Bytes
    """Offloaded to NVMe, per rank."""
    ranks_per_host: int
    load_peak_host: int
    """Host RAM while the model is loaded (before sharding), per host."""
    full_save_host: int
    """Extra host RAM on the main host to gather and save a full state dict."""
    full_save_needed: bool
    platform: str
    fits_gpu: bool | None = None
    fits_host: bool | None = None
    loading_switch: str = ""
    """``fsdp.cpu_ram_efficient_loading`` / ``deepspeed.zero3_init`` where the strategy has one."""
    efficient_loading: bool = False

    def rank_state(self, kind: str) -> int:
        """Bytes of `kind` (params, grads, optimizer, master) this rank holds anywhere."""
        return sum(getattr(b, kind) for b in (self.device, self.host, self.nvme))

    @property
    def per_gpu(self) -> int:
        return 0 if self.platform == "cpu" else self.device.total

    @property
    def per_host(self) -> int:
        """Host RAM per machine at its peak: every local rank's host share (and, on a CPU
        run, its 'device' share), process overhead, plus loading or full-state-dict saving."""
        per_rank = self.host.total + HOST_OVERHEAD_PER_RANK
        if self.platform == "cpu":
            per_rank += self.device.total
        steady = self.ranks_per_host * per_rank
        transient = max(self.load_peak_host, self.full_save_host if self.full_save_needed else 0)
        return steady + transient

    @property
    def nvme_per_host(self) -> int:
        return self.ranks_per_host * self.nvme.total

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "device": self.device.to_dict(),
                "host": self.host.to_dict(), "nvme": self.nvme.to_dict(), "per_gpu": self.per_gpu,
                "per_host": self.per_host, "nvme_per_host": self.nvme_per_host,
                "ranks_per_host": self.ranks_per_host, "load_peak_host": self.load_peak_host,
                "full_save_host": self.full_save_host, "full_save_needed": self.full_save_needed,
                "fits_gpu": self.fits_gpu, "fits_host": self.fits_host,
                "loading_switch": self.loading_switch, "efficient_loading": self.efficient_loading}


def _pad(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _zero3_partition(m: ModelSize, n: int) -> int:
    if m.param_numels:
        return sum(-(-numel // n) * count for numel, count in m.param_numels.items())
    return -(-m.parameters // n)


def estimate_strategy(s: Settings, m: ModelSize, strategy: str, world: int, ranks_per_host: int,
                      platform: str, cp: int = 1, trainable: int | None = None, *, optimizers: RankOptimizers,
                      chosen: bool = False, efficient_loading: bool | None = None,
                      checkpointing: bool | None = None,
                      activations: dict[tuple[int, bool], int] | None = None) -> StrategyEstimate:
    """Bytes for one strategy (``ddp``, ``fsdp2``, ``zero3+offload``, ...) of these settings;
    ``chosen=True`` keeps the settings' own offload options; `efficient_loading` overrides
    the settings' ``fsdp.cpu_ram_efficient_loading`` / ``deepspeed.zero3_init`` (the advice
    asks "would it fit with the switch on?"), `checkpointing` their activation checkpointing;
    `activations`: `activations.activation_table`'s figures (None: computed here); `optimizers`:
    what the ranks build (`options_for`)."""
    o = options_for(s, strategy, world, ranks_per_host, optimizers, chosen)
    switch = loading_switch(o)
    if efficient_loading is not None and switch:
        o.cpu_ram_efficient_loading = efficient_loading
    # LoRA (`trainable`): PEFT adds the adapters to the model; gradients and optimizer get only them
    base = m.parameters
    P = base if trainable is None else base + trainable
    T = base if trainable is None else trainable
    b = 2 if o.mixed_precision in ("bf16", "fp16") else 4
    K = o.optimizer_bytes
    dev, host, nvme = Bytes(), Bytes(), Bytes()
    N = max(1, o.shard)
    block = m.largest_block or max(1, P // max(1, transformer_blocks(m.config)))

    if not (o.fsdp or o.deepspeed) or (o.fsdp and N == 1):
        dev.params, dev.grads, dev.optimizer = 4 * P, 4 * T, K * T
        dev.buffers = 4 * T if world > 1 else 0  # DDP's gradient buckets
    elif o.fsdp:
        state = Bytes(params=4 * -(-P // N), grads=4 * -(-T // N), optimizer=K * -(-T // N))
        unsharded = 2 * block * b + block * 4  # gathered block + prefetch, its full gradient
        if not o.reshard_after_forward:
            unsharded += P * b
        dev.buffers = unsharded
        target = host if o.offload_param == "cpu" else dev
        target.params, target.grads, target.optimizer = state.params, state.grads, state.optimizer
    elif o.deepspeed:
        stage = o.stage
        part = _pad(T, 2 * N) // N  # ZeRO-1/2 flatten and pad to the alignment x world
        params_part = P
        if stage == 3:  # every parameter partitioned, the frozen base's too
            params_part = _zero3_partition(m, N) + (0 if trainable is None else -(-trainable // N))
            part = params_part if trainable is None else -(-trainable // N)
        dev.params = b * params_part
        if stage <= 1:
            dev.grads = b * T
        else:
            dev.grads = 4 * part
        dev.master = 4 * part if (stage >= 1 or b == 2) else 0
        if stage == 0 and b == 2:
            dev.master = 4 * T
        dev.optimizer = K * (part if stage >= 1 else T)
        grad_bytes = b
        buffers = o.reduce_bucket * grad_bytes * (2 if o.overlap_comm else 1) if stage in (1, 2) else 0
        if stage == 3:
            persistent = sum(n * c for n, c in m.param_numels.items() if n < o.persistence_threshold)
            buffers = (persistent * b + min(o.prefetch_bucket, P) * b + 2 * block * b
                       + min(o.reduce_bucket, P) * b)
        dev.buffers = buffers
        if o.offload_optimizer in ("cpu", "nvme"):
            moved = host if o.offload_optimizer == "cpu" else nvme
            moved.master, moved.optimizer = dev.master, dev.optimizer
            host.grads = dev.grads if stage >= 2 else 0
            if stage >= 2:
                dev.grads = 0
            dev.master = dev.optimizer = 0
        if stage == 3 and o.offload_param in ("cpu", "nvme"):
            (host if o.offload_param == "cpu" else nvme).params = dev.params
            dev.params = 0
        if "nvme" in (o.offload_optimizer, o.offload_param):
            host.buffers = 5 * max(100_000_000, block) * b  # pinned swap buffers
    if checkpointing is None:
        checkpointing = s.training.gradient_checkpointing or (o.fsdp and s.fsdp.activation_checkpointing)
    # ring CP splits the sequence under FSDP2, Ulysses (context_parallel.sp_size) under DeepSpeed
    split = cp if o.fsdp else max(1, s.context_parallel.sp_size) if o.deepspeed else 1
    known = activations.get((split, bool(checkpointing))) if activations is not None else None
    dev.activations = known if known is not None else activation_bytes(s, m, split, checkpointing)
    if platform in ("cuda", "rocm"):
        dev.overhead = GPU_OVERHEAD_BYTES

    load_copies = 1 if o.cpu_ram_efficient_loading else ranks_per_host
    load_peak = load_copies * 4 * base  # the model as loaded, before any adapter
    if o.cpu_ram_efficient_loading and o.deepspeed:
        # zero.Init partitions every layer as it is built: DeepSpeed's own estimate
        # (estimate_zero3_model_states_mem_needs, zero_init) is one fp32 layer per rank.
        load_peak = ranks_per_host * 4 * block
    full_save = P * (b if o.deepspeed else 4)
    return StrategyEstimate(
        name=strategy, label=LABELS.get(strategy, strategy), device=dev, host=host, nvme=nvme,
        ranks_per_host=ranks_per_host, load_peak_host=load_peak, full_save_host=full_save,
        full_save_needed=s.checkpoint.state_dict_type == "full" or s.checkpoint.export, platform=platform,
        loading_switch=switch, efficient_loading=o.cpu_ram_efficient_loading)


def compare(s: Settings, m: ModelSize, strategy: Strategy, world: int, ranks_per_host: int, platform: str,
            cp: int, trainable: int | None,
            optimizers: RankOptimizers) -> tuple[StrategyEstimate, list[StrategyEstimate]]:
    """The settings' own strategy (labelled as the table names it) and every compared one, in
    one call, from one table of activation figures."""
    acts = activation_table(s, m, {1, cp, max(1, s.context_parallel.sp_size)})
    chosen = estimate_strategy(s, m, strategy, world, ranks_per_host, platform, cp, trainable, chosen=True,
                               activations=acts, optimizers=optimizers)
    chosen.label = LABELS.get(_describe(s, strategy, optimizers), LABELS.get(strategy, strategy))
    rows = [estimate_strategy(s, m, name, world, ranks_per_host, platform, cp, trainable, activations=acts,
                              optimizers=optimizers) for name in COMPARED]
    return chosen, rows


def _describe(s: Settings, strategy: Strategy, optimizers: RankOptimizers) -> str:
    """The compared row's name for the settings' own strategy (``zero2+offload``, ...)."""
    if strategy.is_deepspeed:
        o = options_for(s, strategy, 1, 1, optimizers, chosen=True)
        if o.offload_param == "nvme" or o.offload_optimizer == "nvme":
            return "zero3+nvme" if strategy is Strategy.ZERO3 else strategy
        if o.offload_optimizer == "cpu" and strategy in (Strategy.ZERO2, Strategy.ZERO3):
            return f"{strategy}+offload"
    if strategy is Strategy.FSDP2 and s.fsdp.offload_params:
        return "fsdp2+offload"
    return strategy


def loading_switch(o: StrategyOptions) -> str:
    """The setting that makes one rank per host load the weights (the others receive their
    shards), or "" when the strategy has none: every rank then loads the fp32 model."""
    if o.fsdp and o.shard > 1:
        return K.FSDP_CPU_RAM_EFFICIENT_LOADING
    if o.deepspeed and o.stage == 3:
        return K.DEEPSPEED_ZERO3_INIT
    return ""
