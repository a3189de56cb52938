"""Memory estimate: bytes per GPU and per host for each sharding strategy. Pure Python.

The pieces, each its own module:

* `estimate_shapes`: parameter tensors of a transformers config (Llama-likes, Gemma 1-3,
  Qwen2/3, Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3 with MLA, GPT-2, BERT-likes), flagged
  uncertain for an architecture it does not know;
* `estimate_model`: `ModelSize` from the detection cache, the built-ins or ``config.json``;
* `estimate_memory`: bytes per rank for one strategy (the table of model states is there);
* `estimate_activations`: activation formulas (dense, MoE, MLA, diffusion resolution);
* `estimate_lora`: LoRA trainable parameters as PEFT creates them (fused MoE experts too);
* `estimate_report`: the `Estimate` result and its table;
* `estimate_advice`: the recommendation, and what would fit when nothing does.

This module puts them together (`estimate`) and keeps the entry points the compiler, the
wizard and the CLI read from the compile result (`CompileResult.estimate`). A strategy fits a GPU only below
``1 - GPU_MARGIN`` of its memory; capacities come from the settings (``hardware.*_gib``),
else from hardware facts that describe the target platform, never from this machine when it
is not the target.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..keys.settings import Settings
from ..plan.plan import Plan
from ..plan.strategy import Strategy
from .activations import activation_bytes  # noqa: F401 - public
from .advice import advise, host_advice, recommend  # noqa: F401 - public
from .lora import lora_trainable
from .model import ModelSize, model_size, resolve_model_path
from .optimizer import RankOptimizers
from .per_rank import (  # noqa: F401 - COMPARED is public here too
    COMPARED,
    GIB,
    GPU_MARGIN,
    StrategyEstimate,
    compare,
    estimate_strategy,
)
from .report import Estimate, fits, fmt_count, gib  # noqa: F401 - public
from .shapes import analytic_count, analytic_shapes  # noqa: F401 - public

# Older names other modules import.
_resolve_model_path = resolve_model_path
_fits = fits
_fmt_count = fmt_count


def capacities(s: Settings, facts=None, platform: str | None = None) -> tuple[int, int, str]:
    """(GPU bytes, host bytes, where they came from): stated settings win over facts.

    Facts (`tuner doctor`'s, or injected) count only when they describe the target
    `platform`: compiling for CUDA on a CPU-only CI host must not check the CI host's RAM.
    """
    gpu = int(s.hardware.gpu_memory_gib * GIB) if s.hardware.gpu_memory_gib else 0
    host = int(s.hardware.host_memory_gib * GIB) if s.hardware.host_memory_gib else 0
    source = []
    if gpu or host:
        source.append("stated in settings")
    if facts is not None and (not gpu or not host):
        if platform and getattr(facts, "platform", platform) != platform:
            source.append(f"hardware facts ignored: they describe a {facts.platform} machine, "
                          f"the target is {platform}")
        else:
            used = False
            if not gpu and facts.gpu_memory_bytes:
                gpu, used = facts.gpu_memory_bytes, True
            if not host and facts.host_memory_bytes:
                host, used = facts.host_memory_bytes, True
            if used:
                source.append(f"hardware facts ({facts.source})")
    return gpu, host, " + ".join(source)


def _set_fits(r: StrategyEstimate, usable_gpu: int, host_cap: int) -> StrategyEstimate:
    if r.platform != "cpu":
        r.fits_gpu = (r.per_gpu <= usable_gpu) if usable_gpu else None
    r.fits_host = (r.per_host <= host_cap) if host_cap else None
    return r


def estimate(s: Settings, plan: Plan, facts=None, base_dir: Path | None = None,
             model: ModelSize | None = None, found=None, ds_config: Mapping[str, Any] | None = None) -> Estimate:
    """The memory estimate for settings `s` and their `plan`.

    `facts` is a `tuner.compiler.read.hardware.HardwareFacts` (None: only what the settings
    state); `model` overrides what `model_size` would find; `found` is what the compile's
    gather stage read about the model (`inputs.ModelFacts`; None: read it now); `ds_config`
    is the compiled deepspeed.json of a DeepSpeed plan (it says which optimizer the ranks run,
    `ranks_optimizers`).
    """
    source = "stated"
    if model is None:
        if found is None:  # a caller outside the compile (tuner check, tests): read the model's facts now
            from ..read.inputs import find_model

            found = find_model(s.model.path, s.model.family, s.model.flavour, base_dir)
        model, source = model_size(s, found)
    platform = plan.platform
    gpu_cap, host_cap, cap_source = capacities(s, facts, platform)
    if model is None:
        return Estimate(None, source, None, [], gpu_cap, host_cap, cap_source, gpu_margin=GPU_MARGIN)
    notes: list[str] = []
    optimizers = ranks_optimizers(s, ds_config)
    trainable = None
    if s.model.type == "lora":
        trainable = lora_trainable(s, model)
        notes.append(f"LoRA: about {fmt_count(trainable)} trainable parameters (rank {s.model.lora_rank})")
    world = max(1, plan.world_size)
    rph = max(1, plan.processes_per_machine)
    machines = max(1, -(-world // rph))
    cp = max(1, s.context_parallel.size)
    usable = int(gpu_cap * (1 - GPU_MARGIN))

    def rerun(name: str, n_machines: int, efficient_loading: bool | None = None,
              checkpointing: bool | None = None) -> StrategyEstimate:
        r = estimate_strategy(s, model, name, n_machines * rph, rph, platform, cp, trainable,
                              chosen=name == plan.strategy, efficient_loading=efficient_loading,
                              checkpointing=checkpointing, optimizers=optimizers)
        return _set_fits(r, usable, host_cap)

    chosen, rows = compare(s, model, plan.strategy, world, rph, platform, cp, trainable, optimizers)
    for r in [chosen] + rows:
        _set_fits(r, usable, host_cap)
    if model.uncertain:
        notes.append(model.uncertain)
    if model.source != "detection" and model.kind in ("unet",):
        notes.append("UNet activations are a rough figure")
    if s.deepspeed.enabled and plan.strategy is Strategy.ZERO3 and not model.param_numels:
        notes.append("parameter sizes unknown: ZeRO-3 persistent small parameters not counted "
                     "(run tuner blocks to count them)")
    if not host_cap:
        notes.append("host RAM not checked: state hardware.host_memory_gib (the target machine's)")
    est = Estimate(model, source, chosen, rows, gpu_cap, host_cap, cap_source, None, notes, GPU_MARGIN)
    advise(est, plan.strategy, machines, rerun)
    return est


# --- entry points the wizard and the CLI use ----------------------------------------------

def for_result(result, facts=None, base_dir: Path | None = None) -> Estimate | None:
    """The estimate for a `tuner.compiler.compile.CompileResult` (None when it has no plan): the one
    its compile computed (`result.estimate`); `facts` given: computed again for them."""
    if result.settings is None or result.plan is None:
        return None
    if facts is None and result.estimate is not None:
        return result.estimate
    return estimate(result.settings, result.plan, facts, base_dir, ds_config=result.deepspeed)


def ranks_optimizers(s: Settings, ds_config: Mapping[str, Any] | None = None) -> RankOptimizers:
    """What ranks build (`optimizer.py`); `ds_config`: the compiled deepspeed.json (None: there is
    none, and the settings' raw ``deepspeed.config`` block is all there is)."""
    raw = ds_config if ds_config is not None else s.deepspeed.config
    block = raw.get("optimizer") if isinstance(raw, Mapping) else None
    named = str(block["type"]) if isinstance(block, Mapping) and block.get("type") else ""
    return RankOptimizers(plain=str(s.training.optimizer), deepspeed=named or str(s.training.optimizer))


def nvme_bytes_per_host(s: Settings, strategy: Strategy, world: int, rph: int, platform: str, found) -> int:
    """What NVMe offload puts on each machine's disk under `strategy` on `world` processes,
    `rph` per machine; 0 if unknown. `found`: the model's gathered `inputs.ModelFacts`."""
    if not strategy.is_deepspeed:
        return 0
    m, _ = model_size(s, found)
    if m is None:
        return 0
    r = estimate_strategy(s, m, strategy, max(1, world), max(1, rph), platform, optimizers=ranks_optimizers(s),
                          chosen=True)
    return r.nvme_per_host
