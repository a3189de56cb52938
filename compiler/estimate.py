"""Memory estimate: bytes per GPU and per host for each sharding strategy. Pure Python.

The model's size comes, first match wins, from (`model_size`):

1. the block-detection cache (`tuner blocks` built the model on the meta device: exact
   parameter count and parameter-size histogram);
2. the built-in tiny configurations (exact counts kept in the registry);
3. an analytical count from a local ``config.json`` (Llama-style decoders incl. GQA and
   MoE, GPT-2, BERT-style encoders).

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
tests/services compares the two). On top come: activations (transformer formula below),
communication and gather buffers (DDP buckets, FSDP's unsharded block and its prefetch,
ZeRO's reduce bucket, ZeRO-3 prefetch and persistent small parameters), and on GPUs the
CUDA context. CPU offload moves the state it names to host RAM, NVMe offload to disk.

Activations of a transformer layer (selective formula after Korthikanti et al. 2022, with
SDPA/flash attention so no score matrix is kept), per token, in the compute dtype:
``5h + 2q + 2kv + 4I`` values for a gated MLP (``2I`` for a plain one); with gradient
checkpointing only each layer's input (``h``) is kept plus one layer recomputed.
Context parallelism divides the sequence by its size. Causal LMs add the logits
(compute dtype, fp32 for the loss and its gradient).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .settings import Settings

GIB = 1024**3
#: CUDA context, cuBLAS workspace and allocator slack per GPU (a measured-on-A100 ballpark).
GPU_OVERHEAD_BYTES = int(1.0 * GIB)
#: What one rank's process costs in host RAM besides model state (torch, CUDA libraries).
HOST_OVERHEAD_PER_RANK = int(1.5 * GIB)
#: DeepSpeed defaults that the estimate needs when the config does not say.
DS_REDUCE_BUCKET = 500_000_000
DS_PREFETCH_BUCKET = 50_000_000
DS_PERSISTENCE_THRESHOLD = 100_000

#: Optimizer state bytes per trainable fp32 parameter.
OPTIMIZER_STATE_BYTES = {"adamw": 8, "adam": 8, "lamb": 8, "onebitadam": 8, "onebitlamb": 8,
                         "zerooneadam": 8, "muadam": 8, "muadamw": 8, "adagrad": 4, "lion": 4,
                         "musgd": 4, "muon": 4, "sgd": 0}

#: The strategies compared side by side, cheapest first (the order recommendations follow).
COMPARED = ("ddp", "zero1", "zero2", "fsdp2", "zero3", "zero2+offload", "fsdp2+offload",
            "zero3+offload", "zero3+nvme")
LABELS = {
    "single": "single process", "ddp": "DDP", "fsdp1": "FSDP v1", "fsdp2": "FSDP2",
    "fsdp2+offload": "FSDP2 + CPU offload", "zero0": "ZeRO-0", "zero1": "ZeRO-1", "zero2": "ZeRO-2",
    "zero2+offload": "ZeRO-2 + CPU optimizer", "zero3": "ZeRO-3",
    "zero3+offload": "ZeRO-3 + CPU offload", "zero3+nvme": "ZeRO-3 + NVMe offload",
}


# --- what is known about the model ---------------------------------------------------------

@dataclass
class ModelSize:
    """The model facts the estimate needs."""

    parameters: int
    source: str
    """``detection`` (cache), ``builtin``, ``config.json`` or ``stated``."""
    param_numels: dict[int, int] = field(default_factory=dict)
    """Elements per parameter tensor -> count (empty when unknown)."""
    largest_block: int = 0
    """Parameters of the largest wrapped block (FSDP's unsharded unit); 0 = unknown."""
    config: dict[str, Any] = field(default_factory=dict)
    kind: str = "decoder"
    """``decoder``, ``encoder``, ``unet``, ``dit`` or ``unknown`` (for activations)."""


def _cfg(config: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if config.get(n) is not None:
            return config[n]
    return default


def _decoder_shapes(c: dict[str, Any]) -> list[int]:
    """Parameter sizes (elements) of a Llama-style decoder; GQA, biases, MoE and tied
    embeddings included. Raises KeyError when the config lacks the basic fields."""
    h = int(c["hidden_size"])
    layers = int(c["num_hidden_layers"])
    heads = int(c["num_attention_heads"])
    kv = int(_cfg(c, "num_key_value_heads", default=heads))
    hd = int(_cfg(c, "head_dim", default=h // heads))
    inter = int(_cfg(c, "intermediate_size", default=4 * h))
    vocab = int(c["vocab_size"])
    bias = bool(_cfg(c, "attention_bias", default=c.get("model_type") in ("qwen2", "qwen2_moe")))
    experts = int(_cfg(c, "num_local_experts", "num_experts", default=0) or 0)
    moe_inter = int(_cfg(c, "moe_intermediate_size", default=inter))
    sizes = [vocab * h]
    for _ in range(layers):
        sizes += [h * heads * hd, h * kv * hd, h * kv * hd, heads * hd * h, h, h]
        if bias:
            sizes += [heads * hd, kv * hd, kv * hd]
        if c.get("model_type") in ("qwen3", "qwen3_moe", "olmo2", "gemma3"):
            sizes += [hd, hd]
        if experts:
            sizes += [h * experts] + [h * moe_inter, h * moe_inter, moe_inter * h] * experts
        else:
            sizes += [h * inter, h * inter, inter * h]
    sizes.append(h)
    if not c.get("tie_word_embeddings", False):
        sizes.append(vocab * h)
    return sizes


def _gpt2_shapes(c: dict[str, Any]) -> list[int]:
    h, layers = int(c["n_embd"]), int(c["n_layer"])
    inter = int(c.get("n_inner") or 4 * h)
    vocab, pos = int(c["vocab_size"]), int(c.get("n_positions", 1024))
    sizes = [vocab * h, pos * h]
    for _ in range(layers):
        sizes += [h, h, h * 3 * h, 3 * h, h * h, h, h, h, h * inter, inter, inter * h, h]
    sizes += [h, h]  # final LayerNorm; lm_head is tied
    return sizes


def _encoder_shapes(c: dict[str, Any]) -> list[int]:
    """BERT-style encoder with pooler (what AutoModel builds for BERT/RoBERTa/MiniLM)."""
    h, layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
    inter = int(_cfg(c, "intermediate_size", default=4 * h))
    vocab = int(c["vocab_size"])
    sizes = [vocab * h, int(c.get("max_position_embeddings", 512)) * h]
    if int(c.get("type_vocab_size", 2) or 0):
        sizes.append(int(c.get("type_vocab_size", 2)) * h)
    sizes += [h, h]
    for _ in range(layers):
        sizes += [h * h, h] * 4 + [h, h] + [h * inter, inter, inter * h, h] + [h, h]
    sizes += [h * h, h]
    return sizes


_ENCODERS = ("bert", "roberta", "xlm-roberta", "electra", "camembert", "mpnet")


def analytic_shapes(config: dict[str, Any]) -> tuple[list[int], str] | None:
    """Parameter sizes and kind for a transformers config, or None when the shape is unknown."""
    mt = str(config.get("model_type", ""))
    if _too_many_parameters_to_list(config):
        return None
    try:
        if mt == "gpt2":
            return _gpt2_shapes(config), "decoder"
        if mt in _ENCODERS:
            return _encoder_shapes(config), "encoder"
        if {"hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"} <= set(config):
            return _decoder_shapes(config), "decoder"
    except (KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError):
        return None
    return None


#: More parameter tensors than this are not listed one by one (real models have thousands;
#: a hand-made config.json with millions of layers once took half a minute to compile).
MAX_LISTED_TENSORS = 1_000_000


def _too_many_parameters_to_list(config: dict[str, Any]) -> bool:
    """True when the config's layer and expert counts are not plausible small integers."""
    counts = []
    for key in ("num_hidden_layers", "n_layer", "num_local_experts", "num_experts"):
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LISTED_TENSORS:
            return True
        counts.append(max(1, value))
    total = 1
    for n in counts:
        total *= n
    return total * 16 > MAX_LISTED_TENSORS


def _histogram(sizes: list[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for n in sizes:
        out[n] = out.get(n, 0) + 1
    return out


def _kind(config: dict[str, Any], family: str) -> str:
    cls = str(config.get("_class_name", ""))
    if cls:
        return "unet" if "UNet" in cls else "dit"
    if family == "embedding" or config.get("model_type") in _ENCODERS:
        return "encoder"
    return "decoder"


def _resolve_model_path(path: str, base_dir: Path | None) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = (base_dir or Path.cwd()) / p
    return p


def model_size(s: Settings, base_dir: Path | None = None) -> tuple[ModelSize | None, str]:
    """What is known about the settings' model, and a sentence saying where it came from
    (or why nothing is known). Reads files only; never builds a model."""
    from . import block_cache
    from tuner.runtime import tiny_configs  # pure dicts

    m = s.model
    packaged = tiny_configs.packaged_dir(m.path)
    builtin = tiny_configs.is_builtin(m.path) and packaged is None
    location = m.path if tiny_configs.is_builtin(m.path) else str(_resolve_model_path(m.path, base_dir))
    cached = block_cache.find(location, m.family, m.flavour)
    if cached is not None:
        hist = {int(k): int(v) for k, v in cached.param_numels.items()}
        return (ModelSize(cached.total_parameters, "detection", hist, cached.largest_block_parameters,
                          cached.config, _kind(cached.config, m.family)),
                f"parameters from block detection of {m.path} (cached)")
    if builtin:
        try:
            name = tiny_configs.resolve_name(m.path, m.family, m.flavour)
        except KeyError as exc:
            return None, str(exc.args[0])
        entry = tiny_configs.TINY_CONFIGS[name]
        shapes = analytic_shapes(entry["config"]) if entry["library"] == "transformers" else None
        hist = _histogram(shapes[0]) if shapes and sum(shapes[0]) == entry["parameters"] else {}
        return (ModelSize(entry["parameters"], "builtin", hist, 0, dict(entry["config"]),
                          _kind(entry["config"], m.family)), f"built-in {name}")
    cfg_file = block_cache.model_config_file(packaged or location, m.flavour)
    if cfg_file is None:
        return None, (f"model {m.path} is not available here (no config.json); "
                      "the estimate needs the model's size: run the estimate where the model is")
    from .files import FileError, load_json

    try:
        config = load_json(cfg_file, "model config")
    except FileError as exc:
        return None, exc.message
    shapes = analytic_shapes(config) if isinstance(config, dict) and "_class_name" not in config else None
    if shapes is None:
        return None, (f"no parameter count for {m.path}: run `tuner blocks {m.path}` once "
                      "(meta device, seconds) and the estimate reads its cached result")
    return (ModelSize(sum(shapes[0]), "config.json", _histogram(shapes[0]), 0, config, shapes[1]),
            f"parameters counted from {cfg_file}")


# --- the strategy view of the settings ----------------------------------------------------------

@dataclass
class StrategyOptions:
    """One strategy with the options that change its memory."""

    name: str
    world: int
    ranks_per_host: int
    shard: int
    """Ranks a ZeRO/FSDP shard group spans."""
    mixed_precision: str
    optimizer_bytes: int
    offload_optimizer: str = "none"
    offload_param: str = "none"
    reshard_after_forward: bool = True
    reduce_bucket: int = DS_REDUCE_BUCKET
    prefetch_bucket: int = DS_PREFETCH_BUCKET
    persistence_threshold: int = DS_PERSISTENCE_THRESHOLD
    overlap_comm: bool = False
    cpu_ram_efficient_loading: bool = False

    @property
    def deepspeed(self) -> bool:
        return self.name.startswith("zero")

    @property
    def stage(self) -> int:
        return int(self.name[4]) if self.deepspeed else -1

    @property
    def fsdp(self) -> bool:
        return self.name.startswith("fsdp")


def _raw_zero(s: Settings) -> dict[str, Any]:
    raw = s.deepspeed.config if isinstance(s.deepspeed.config, dict) else {}
    zero = raw.get("zero_optimization", {})
    return zero if isinstance(zero, dict) else {}


def _num(value: Any, default: int) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _optimizer_bytes(s: Settings, deepspeed: bool) -> int:
    if deepspeed:
        raw = s.deepspeed.config if isinstance(s.deepspeed.config, dict) else {}
        opt = raw.get("optimizer", {}) if isinstance(raw.get("optimizer"), dict) else {}
        name = str(opt.get("type") or s.deepspeed.optimizer)
    else:
        name = s.training.optimizer
    return OPTIMIZER_STATE_BYTES.get(name.lower().replace("_", "").replace("-", ""), 8)


def options_for(s: Settings, strategy: str, world: int, ranks_per_host: int,
                chosen: bool = False) -> StrategyOptions:
    """The memory-relevant options of `strategy`, taken from the settings where they apply.

    For the settings' own strategy (``chosen=True``) the offload choices are the settings';
    a compared variant (``zero3``, ``zero3+offload``, ...) sets its own.
    """
    base = strategy.split("+")[0]
    zero = _raw_zero(s)
    ds = s.deepspeed
    opts = StrategyOptions(name=base, world=world, ranks_per_host=ranks_per_host, shard=world,
                           mixed_precision=s.training.mixed_precision,
                           optimizer_bytes=_optimizer_bytes(s, base.startswith("zero")))
    if base.startswith("zero"):
        off_opt = str((zero.get("offload_optimizer") or {}).get("device", ds.offload_optimizer)).lower()
        off_par = str((zero.get("offload_param") or {}).get("device", ds.offload_param)).lower()
        opts.reduce_bucket = _num(zero.get("reduce_bucket_size"), DS_REDUCE_BUCKET)
        opts.prefetch_bucket = _num(zero.get("stage3_prefetch_bucket_size"), DS_PREFETCH_BUCKET)
        opts.persistence_threshold = _num(zero.get("stage3_param_persistence_threshold"), DS_PERSISTENCE_THRESHOLD)
        opts.overlap_comm = bool(zero.get("overlap_comm", base == "zero3"))
        opts.cpu_ram_efficient_loading = bool(ds.zero3_init) and base == "zero3"
        opts.offload_optimizer, opts.offload_param = off_opt, off_par
    elif base.startswith("fsdp"):
        f = s.fsdp
        opts.reshard_after_forward = f.reshard_after_forward
        opts.cpu_ram_efficient_loading = f.cpu_ram_efficient_loading
        opts.offload_param = "cpu" if f.offload_params else "none"
        if base == "fsdp1":  # FSDP2 ignores sharding_strategy (it has reshard_after_forward)
            opts.reshard_after_forward = f.sharding_strategy in ("full_shard", "hybrid_shard") and f.reshard_after_forward
            if f.sharding_strategy == "no_shard":
                opts.shard = 1
            elif f.sharding_strategy == "hybrid_shard":
                opts.shard = max(1, ranks_per_host)
    if not chosen:
        if base.startswith("zero"):
            opts.offload_optimizer, opts.offload_param = {
                "zero2+offload": ("cpu", "none"), "zero3+offload": ("cpu", "cpu"),
                "zero3+nvme": ("nvme", "nvme")}.get(strategy, ("none", "none"))
        elif base.startswith("fsdp"):
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
                "fits_gpu": self.fits_gpu, "fits_host": self.fits_host}


def _pad(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _zero3_partition(m: ModelSize, n: int) -> int:
    if m.param_numels:
        return sum(-(-numel // n) * count for numel, count in m.param_numels.items())
    return -(-m.parameters // n)


def _activations(s: Settings, m: ModelSize, cp: int, checkpointing: bool) -> int:
    """Activation bytes of one micro batch on one rank (see the module docstring)."""
    a = 2 if s.training.mixed_precision in ("bf16", "fp16") else 4
    b = s.training.micro_batch_size
    c = m.config
    if m.kind in ("decoder", "encoder"):
        h = int(_cfg(c, "hidden_size", "n_embd", "d_model", default=0) or 0)
        layers = int(_cfg(c, "num_hidden_layers", "n_layer", default=0) or 0)
        if not h or not layers:
            return 0
        heads = int(_cfg(c, "num_attention_heads", "n_head", default=1) or 1)
        hd = int(_cfg(c, "head_dim", default=h // heads) or h // heads)
        kv = int(_cfg(c, "num_key_value_heads", default=heads) or heads) * hd
        q = heads * hd
        inter = int(_cfg(c, "intermediate_size", "n_inner", default=4 * h) or 4 * h)
        gated = m.kind == "decoder" and c.get("model_type") != "gpt2"
        seq = max(1, s.data.seq_len // max(1, cp))
        tokens = b * seq * (2 if s.model.family == "embedding" else 1)  # query + document
        per_token_layer = a * (5 * h + 2 * q + 2 * kv + (4 if gated else 2) * inter)
        if checkpointing:
            body = tokens * (layers * a * h + per_token_layer)
        else:
            body = tokens * layers * per_token_layer
        extra = tokens * a * h * 2  # embedding output, final norm
        if s.model.family == "causal_lm":
            vocab = int(_cfg(c, "vocab_size", default=0) or 0)
            extra += tokens * vocab * (a + 4 + 4)  # logits, fp32 upcast for the loss, its gradient
        return int(body + extra)
    if m.kind == "dit":
        heads = int(c.get("num_attention_heads", 16))
        h = heads * int(c.get("attention_head_dim", 72))
        layers = int(c.get("num_layers", 28))
        side = int(c.get("sample_size", 32)) // max(1, int(c.get("patch_size", 2) or 2))
        tokens = b * side * side
        per = a * (5 * h + 4 * h + 2 * 4 * h)
        return int(tokens * (layers * a * h + per if checkpointing else layers * per))
    if m.kind == "unet":
        # Rough: a UNet keeps ~20 feature maps per block level and layer at each resolution.
        side = int(c.get("sample_size", 64))
        chans = c.get("block_out_channels") or [320, 640, 1280, 1280]
        lpb = int(c.get("layers_per_block", 2) or 2)
        total = sum(ch * (side // (2 ** i)) ** 2 for i, ch in enumerate(chans))
        factor = 4 if checkpointing else 20 * lpb
        return int(b * a * total * factor * 2)  # down and up paths
    return 0


def estimate_strategy(s: Settings, m: ModelSize, strategy: str, world: int, ranks_per_host: int,
                      platform: str, cp: int = 1, trainable: int | None = None,
                      chosen: bool = False) -> StrategyEstimate:
    """Bytes for one strategy (``ddp``, ``fsdp2``, ``zero3+offload``, ...) of these settings;
    ``chosen=True`` keeps the settings' own offload options."""
    o = options_for(s, strategy, world, ranks_per_host, chosen)
    P = m.parameters
    T = P if trainable is None else trainable
    b = 2 if o.mixed_precision in ("bf16", "fp16") else 4
    K = o.optimizer_bytes
    dev, host, nvme = Bytes(), Bytes(), Bytes()
    N = max(1, o.shard)
    block = m.largest_block or max(1, P // max(1, int(_cfg(m.config, "num_hidden_layers", "num_layers", default=1) or 1)))
    name = o.name

    if name in ("single", "ddp") or (o.fsdp and N == 1):
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
        if stage == 3:
            part = _zero3_partition(m, N)
        dev.params = b * (part if stage == 3 else P)
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
    checkpointing = s.training.gradient_checkpointing or (o.fsdp and s.fsdp.activation_checkpointing)
    dev.activations = _activations(s, m, cp if o.fsdp else 1, checkpointing)
    if platform in ("cuda", "rocm"):
        dev.overhead = GPU_OVERHEAD_BYTES

    load_copies = 1 if o.cpu_ram_efficient_loading else ranks_per_host
    full_save = P * (b if o.deepspeed else 4)
    return StrategyEstimate(
        name=strategy, label=LABELS.get(strategy, strategy), device=dev, host=host, nvme=nvme,
        ranks_per_host=ranks_per_host, load_peak_host=load_copies * 4 * P, full_save_host=full_save,
        full_save_needed=s.checkpoint.state_dict_type == "full" or s.checkpoint.export, platform=platform)


@dataclass
class Estimate:
    """The estimate for one settings file: the chosen strategy and the comparison."""

    model: ModelSize | None
    source: str
    chosen: StrategyEstimate | None
    rows: list[StrategyEstimate]
    gpu_capacity: int = 0
    """Bytes per GPU the estimate is checked against; 0 = unknown."""
    host_capacity: int = 0
    capacity_source: str = ""
    recommendation: str | None = None
    """The cheapest strategy that fits (the lowest ZeRO stage / cheapest FSDP option)."""
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool | None:
        if self.chosen is None:
            return None
        flags = [f for f in (self.chosen.fits_gpu, self.chosen.fits_host) if f is not None]
        return all(flags) if flags else None

    def row(self, name: str) -> StrategyEstimate | None:
        return next((r for r in self.rows if r.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": asdict(self.model) if self.model else None, "source": self.source,
            "chosen": self.chosen.to_dict() if self.chosen else None,
            "strategies": [r.to_dict() for r in self.rows],
            "gpu_capacity": self.gpu_capacity, "host_capacity": self.host_capacity,
            "capacity_source": self.capacity_source, "fits": self.fits,
            "recommendation": self.recommendation, "notes": self.notes,
        }

    def table(self) -> str:
        """The side-by-side table (what `tuner estimate` prints and the wizard shows)."""
        if self.model is None or self.chosen is None:
            return "memory estimate unavailable: " + self.source
        lines = [f"model: {_fmt_count(self.model.parameters)} parameters ({self.source})"]
        cap = []
        if self.gpu_capacity:
            cap.append(f"GPU {gib(self.gpu_capacity)}")
        if self.host_capacity:
            cap.append(f"host {gib(self.host_capacity)}")
        lines.append("capacity: " + (", ".join(cap) + f" ({self.capacity_source})" if cap else
                                     "unknown (state hardware.gpu_memory_gib / host_memory_gib or run tuner doctor)"))
        header = (f"  {'strategy':<33}{'params':>9}{'grads':>9}{'optim':>9}{'master':>9}{'activ':>9}"
                  f"{'buffers':>9}{'per GPU':>10}{'host/rank':>10}{'per host':>10}{'NVMe':>9}  fits")
        lines += ["", "per rank, GiB (params..buffers on the device; offloaded state under host/NVMe)", header,
                  "  " + "-" * (len(header) - 2)]
        for r in [self.chosen] + [r for r in self.rows if r.name != self.chosen.name]:
            d = r.device
            mark = ">" if r is self.chosen else " "
            fits = {True: "yes", False: "NO", None: "?"}[_fits(r)]
            label = r.label + (" (chosen)" if r is self.chosen else "")
            lines.append(f"{mark} {label:<33}{_g(d.params):>9}{_g(d.grads):>9}{_g(d.optimizer):>9}{_g(d.master):>9}"
                         f"{_g(d.activations):>9}{_g(d.buffers):>9}{_g(r.per_gpu or d.total):>10}"
                         f"{_g(r.host.total):>10}{_g(r.per_host):>10}{_g(r.nvme_per_host):>9}  {fits}")
        c = self.chosen
        lines.append("")
        lines.append(f"full state dict save: +{gib(c.full_save_host)} host RAM on the main host"
                     + ("" if c.full_save_needed else " (not needed: sharded checkpoints, no export)"))
        if self.recommendation:
            lines.append(f"recommended: {LABELS.get(self.recommendation, self.recommendation)}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _fits(r: StrategyEstimate) -> bool | None:
    flags = [f for f in (r.fits_gpu, r.fits_host) if f is not None]
    return all(flags) if flags else None


def gib(n: int | float) -> str:
    return f"{n / GIB:.2f} GiB"


def _g(n: int) -> str:
    return "-" if not n else (f"{n / GIB:.2f}" if n >= 0.01 * GIB else f"{n / 1024**2:.1f}M")


def _fmt_count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


def lora_trainable(s: Settings, m: ModelSize) -> int:
    """Trainable parameters of a LoRA run: rank x (in + out) per adapted linear layer."""
    c = m.config
    h = int(_cfg(c, "hidden_size", "n_embd", default=0) or 0)
    layers = int(_cfg(c, "num_hidden_layers", "n_layer", "num_layers", default=0) or 0)
    r = s.model.lora_rank
    if not h or not layers:
        return max(1, m.parameters // 200)  # about 0.5% when the shape is unknown
    targets = s.model.lora_target_modules or ["q_proj", "v_proj"]
    heads = int(_cfg(c, "num_attention_heads", default=1) or 1)
    hd = int(_cfg(c, "head_dim", default=h // heads) or h // heads)
    kv = int(_cfg(c, "num_key_value_heads", default=heads) or heads) * hd
    inter = int(_cfg(c, "intermediate_size", default=4 * h) or 4 * h)
    dims = {"q_proj": (h, heads * hd), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (heads * hd, h),
            "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h),
            "query": (h, h), "key": (h, h), "value": (h, h)}
    per_layer = sum(r * (i + o) for t in targets for i, o in [dims.get(t, (h, h))])
    return layers * per_layer


def capacities(s: Settings, facts=None) -> tuple[int, int, str]:
    """(GPU bytes, host bytes, where they came from): stated settings win over facts."""
    gpu = int(s.hardware.gpu_memory_gib * GIB) if s.hardware.gpu_memory_gib else 0
    host = int(s.hardware.host_memory_gib * GIB) if s.hardware.host_memory_gib else 0
    source = []
    if gpu or host:
        source.append("stated in settings")
    if facts is not None and (not gpu or not host):
        used = False
        if not gpu and facts.gpu_memory_bytes:
            gpu, used = facts.gpu_memory_bytes, True
        if not host and facts.host_memory_bytes:
            host, used = facts.host_memory_bytes, True
        if used:
            source.append(f"hardware facts ({facts.source})")
    return gpu, host, " + ".join(source)


def estimate(s: Settings, plan, facts=None, base_dir: Path | None = None,
             model: ModelSize | None = None) -> Estimate:
    """The memory estimate for settings `s` and their `plan` (`tuner.compiler.rules.Plan`).

    `facts` is a `tuner.compiler.hardware.HardwareFacts` (None: only what the settings
    state); `model` overrides what `model_size` would find.
    """
    source = "stated"
    if model is None:
        model, source = model_size(s, base_dir)
    gpu_cap, host_cap, cap_source = capacities(s, facts)
    if model is None:
        return Estimate(None, source, None, [], gpu_cap, host_cap, cap_source)
    notes: list[str] = []
    trainable = None
    if s.model.type == "lora":
        trainable = lora_trainable(s, model)
        notes.append(f"LoRA: about {_fmt_count(trainable)} trainable parameters (rank {s.model.lora_rank})")
    world = max(1, plan.world_size)
    rph = max(1, plan.processes_per_machine)
    cp = max(1, s.context_parallel.size)
    platform = plan.platform
    chosen_name = plan.strategy if plan.strategy != "single" else "single"
    chosen = estimate_strategy(s, model, chosen_name, world, rph, platform, cp, trainable, chosen=True)
    chosen.label = LABELS.get(_describe(s, plan.strategy), LABELS.get(plan.strategy, plan.strategy))
    rows = [estimate_strategy(s, model, name, world, rph, platform, cp, trainable) for name in COMPARED]
    for r in [chosen] + rows:
        if platform == "cpu":
            r.fits_host = (r.per_host <= host_cap) if host_cap else None
        else:
            r.fits_gpu = (r.per_gpu <= gpu_cap) if gpu_cap else None
            r.fits_host = (r.per_host <= host_cap) if host_cap else None
    if model.source != "detection" and model.kind in ("unet",):
        notes.append("UNet activations are a rough figure")
    if s.deepspeed.enabled and plan.strategy == "zero3" and not model.param_numels:
        notes.append("parameter sizes unknown: ZeRO-3 persistent small parameters not counted "
                     "(run tuner blocks to count them)")
    est = Estimate(model, source, chosen, rows, gpu_cap, host_cap, cap_source, None, notes)
    est.recommendation = recommend(est, plan.strategy)
    return est


def _describe(s: Settings, strategy: str) -> str:
    if strategy.startswith("zero"):
        o = options_for(s, strategy, 1, 1, chosen=True)
        if o.offload_param == "nvme" or o.offload_optimizer == "nvme":
            return "zero3+nvme" if strategy == "zero3" else strategy
        if o.offload_optimizer == "cpu":
            return "zero3+offload" if strategy == "zero3" else ("zero2+offload" if strategy == "zero2" else strategy)
    if strategy == "fsdp2" and s.fsdp.offload_params:
        return "fsdp2+offload"
    return strategy


def recommend(est: Estimate, strategy: str) -> str | None:
    """The cheapest compared strategy that fits; within DeepSpeed the lowest ZeRO stage,
    within FSDP the cheapest FSDP option; None when nothing is known to fit."""
    if strategy.startswith("zero"):
        family = [n for n in COMPARED if n.startswith("zero")]
    elif strategy.startswith("fsdp"):
        family = [n for n in COMPARED if n.startswith("fsdp")]
    else:
        family = list(COMPARED)
    for names in (family, list(COMPARED)):
        for name in names:
            r = est.row(name)
            if r is not None and _fits(r):
                return name
    return None


# --- entry points the wizard and the CLI use ----------------------------------------------

def for_result(result, facts=None, base_dir: Path | None = None) -> Estimate | None:
    """The estimate for a `tuner.compiler.CompileResult` (None when it has no plan)."""
    if result.settings is None or result.plan is None:
        return None
    return estimate(result.settings, result.plan, facts, base_dir)


def render_for_text(settings_text: str, settings_path: Path | None = None) -> str:
    """The estimate table for settings given as TOML text (the wizard's Review step)."""
    from . import compile_text
    from .hardware import local_facts

    path = Path(settings_path) if settings_path else None
    result = compile_text(settings_text, path=path)
    est = for_result(result, local_facts(), path.parent if path else None)
    if est is None:
        return "memory estimate unavailable: the settings do not compile yet"
    return est.table()


def nvme_bytes_per_host(s: Settings, plan, base_dir: Path | None = None) -> int:
    """What NVMe offload puts on each machine's disk for the chosen strategy; 0 if unknown."""
    if not plan.strategy.startswith("zero"):
        return 0
    m, _ = model_size(s, base_dir)
    if m is None:
        return 0
    r = estimate_strategy(s, m, plan.strategy, max(1, plan.world_size), max(1, plan.processes_per_machine),
                          plan.platform, chosen=True)
    return r.nvme_per_host
