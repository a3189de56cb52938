"""What would fit: the recommendation line and the advice when the chosen strategy does not.

In order, the first that applies:

1. the cheapest compared strategy that fits as configured (within DeepSpeed the lowest ZeRO
   stage, within FSDP the cheapest FSDP option, else the cheapest overall);
2. activation checkpointing (``training.gradient_checkpointing``), where it is off and turning
   it on makes the chosen strategy (else the cheapest compared one) fit on these machines:
   activations are what sharding cannot split, and a 7B model at seq_len 4096 needs far more
   for them than for its weights; it costs a recomputed forward pass, not more GPUs;
3. a strategy that fits once its loading switch is on: when host RAM is the bottleneck
   because every rank loads the fp32 weights, only ``fsdp.cpu_ram_efficient_loading`` (FSDP)
   or ``deepspeed.zero3_init`` (ZeRO-3) remove it (sharding or checkpointing do not);
4. the fewest machines (same GPUs per machine) on which a sharded strategy fits;
5. nothing at any scale: what holds the GPU memory that sharding cannot split (activations),
   and the switches that shrink it.

`Rerun` re-estimates a strategy for another world size or with a switch flipped.
"""

from __future__ import annotations

from collections.abc import Callable

from ..keys import paths as K
from .per_rank import COMPARED, StrategyEstimate, base_strategy
from .report import Estimate, fits, gib, label

#: Rerun(strategy, machines, efficient_loading=None, checkpointing=None) -> estimate with fits set.
CHECKPOINTING = K.TRAINING_GRADIENT_CHECKPOINTING
Rerun = Callable[..., StrategyEstimate]
MAX_MACHINES = 4096
SCALABLE = ("zero3", "fsdp2", "zero3+offload", "fsdp2+offload", "zero3+nvme")


def recommend(est: Estimate, strategy: str) -> str | None:
    """The cheapest compared strategy that fits; within DeepSpeed the lowest ZeRO stage,
    within FSDP the cheapest FSDP option; None when nothing is known to fit."""
    base = base_strategy(strategy)
    if base.is_deepspeed:
        family = [n for n in COMPARED if base_strategy(n).is_deepspeed]
    elif base.is_fsdp:
        family = [n for n in COMPARED if base_strategy(n).is_fsdp]
    else:
        family = list(COMPARED)
    for names in (family, list(COMPARED)):
        for name in names:
            r = est.row(name)
            if r is not None and fits(r):
                return name
    return None


def host_advice(r: StrategyEstimate, capacity: int) -> str:
    """Why `r` does not fit in host RAM and what removes that bottleneck."""
    save = r.full_save_host if r.full_save_needed else 0
    transient = max(r.load_peak_host, save)
    steady = r.per_host - transient
    one_copy = r.load_peak_host // max(1, r.ranks_per_host)
    if r.load_peak_host >= save and steady <= capacity:
        if r.ranks_per_host > 1 and not r.efficient_loading and steady + max(one_copy, save) <= capacity:
            cause = (f"host RAM is the bottleneck while the model loads: each of the {r.ranks_per_host} ranks "
                     f"per machine loads the fp32 weights ({gib(r.load_peak_host)} together)")
            if r.loading_switch:
                return f"{cause}; set {r.loading_switch} = true to load them once per machine"
            return (f"{cause}; only fsdp.cpu_ram_efficient_loading (FSDP) or deepspeed.zero3_init (ZeRO-3) load "
                    "them once per machine: sharding further or checkpointing does not help")
        return (f"loading the model takes {gib(r.load_peak_host)} host RAM per machine on top of {gib(steady)} "
                "steady: more host RAM per machine is the fix (more machines do not shrink it)")
    if save > r.load_peak_host and steady + r.load_peak_host <= capacity:
        return (f"saving a full state dict gathers {gib(save)} on the main host: set "
                "checkpoint.state_dict_type = \"sharded\" and checkpoint.export = false, or add host RAM")
    return (f"{r.label} needs {gib(r.per_host)} host RAM per machine ({gib(steady)} steady: rank processes "
            "and offloaded state): offload less or spread over more machines")


def _min_machines(name: str, machines: int, rerun: Rerun) -> tuple[int, StrategyEstimate] | None:
    """The fewest machines (> `machines`) on which `name` fits, with its loading switch on."""
    def ok(n: int) -> StrategyEstimate | None:
        r = rerun(name, n, efficient_loading=True)
        return r if fits(r) else None

    lo, hi = machines, max(2, machines * 2)
    while ok(hi) is None:
        lo, hi = hi, hi * 2
        if hi > MAX_MACHINES:
            return None
    while hi - lo > 1:  # per-GPU and per-host bytes only shrink as the shard group grows
        mid = (lo + hi) // 2
        if ok(mid) is None:
            lo = mid
        else:
            hi = mid
    return hi, rerun(name, hi, efficient_loading=True)


def _checkpointing(est: Estimate, strategy: str, machines: int, rerun: Rerun) -> bool:
    """Name activation checkpointing where it is off and makes a strategy fit as it is (the
    chosen one first, then the compared ones, cheapest first); True when it did."""
    c = est.chosen
    assert c is not None
    for name in [strategy] + [n for n in COMPARED if n != strategy]:
        r = c if name == strategy else est.row(name)
        if r is None:
            continue
        on = rerun(name, machines, checkpointing=True)
        if on.device.activations >= r.device.activations:
            return False  # already on (or nothing to recompute): not the fix
        if fits(on):
            est.with_checkpointing = on
            est.recommendation_line = f"{on.label} with {CHECKPOINTING} = true ({gib(on.per_gpu)} per GPU)"
            est.advice.insert(0, f"activation checkpointing ({CHECKPOINTING} = true) takes {on.label} from "
                                 f"{gib(r.per_gpu)} to {gib(on.per_gpu)} per GPU, which fits: the cheapest fix "
                                 "(activations are recomputed in the backward pass, about a third more compute)")
            return True
    return False


def advise(est: Estimate, strategy: str, machines: int, rerun: Rerun) -> None:
    """Fill `est.recommendation`, `est.recommendation_line` and `est.advice`."""
    c = est.chosen
    if c is None:
        return
    if c.fits_gpu is False:
        est.advice.append(f"{c.label} needs {gib(c.per_gpu)} per GPU; {gib(est.usable_gpu)} usable "
                          f"({gib(est.gpu_capacity)} less the {100 * est.gpu_margin:.0f}% margin)")
    if c.fits_host is False:
        est.advice.append(host_advice(c, est.host_capacity))
    est.recommendation = recommend(est, strategy)
    if est.recommendation:
        est.recommendation_line = label(est.recommendation)
        return
    if fits(c) is None and all(fits(r) is None for r in est.rows):
        return  # no capacity known: nothing to recommend
    if c.fits_gpu is False and _checkpointing(est, strategy, machines, rerun):
        return
    for name in [strategy] + [n for n in COMPARED if n != strategy]:
        r = est.row(name) or (c if name == c.name else None)
        if r is None or r.fits_gpu is False or not r.loading_switch or r.efficient_loading:
            continue
        flipped = rerun(name, machines, efficient_loading=True)
        if fits(flipped):
            est.recommendation_line = f"{flipped.label} with {r.loading_switch} = true"
            return
    best = None
    for name in SCALABLE:
        found = _min_machines(name, machines, rerun)
        if found and (best is None or found[0] < best[0]):
            best = (found[0], found[1])
    if best is not None:
        n, r = best
        gpus = n * r.ranks_per_host
        as_set = est.row(r.name)
        needs_switch = r.loading_switch and not (as_set is not None and as_set.efficient_loading)
        switch = f", {r.loading_switch} = true" if needs_switch else ""
        est.recommendation_line = (f"nothing fits on {machines} machine(s); {r.label} fits on {gpus} GPUs "
                                   f"({n} machines of {r.ranks_per_host}{switch})")
        return
    est.recommendation_line = "nothing fits at any number of machines"
    at_scale = [rerun(name, MAX_MACHINES, efficient_loading=True) for name in SCALABLE]
    smallest = min(at_scale, key=lambda r: r.device.total)
    if smallest.fits_gpu is False:
        fixed = smallest.device.activations + smallest.device.overhead
        est.advice.append(f"activations and the CUDA context need {gib(fixed)} per GPU whatever the sharding: "
                          "enable training.gradient_checkpointing, lower training.micro_batch_size or "
                          "data.seq_len / data.resolution, or split the sequence (context_parallel.size)")
    else:
        host = host_advice(min(at_scale, key=lambda r: r.per_host), est.host_capacity)
        if host not in est.advice:
            est.advice.append(host)
