"""Judge what the ranks saw in the rehearsal (observer.py's files) against the plan.

One function per check; each returns findings naming the rank (or "all") and the fix.
Checks that need what no rank recorded (a script without an optimizer step has no
gradients to look at) say so as "skipped" rather than pass.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...compiler.plan.strategy import Strategy
from . import collectives, losses, samples, saves
from .findings import Finding, fault, ok, skipped
from .planned import memory, schedule

if TYPE_CHECKING:
    from ..artefacts import Artefacts

FSDP_FIX = ("pass the model and the optimizer to ONE `accelerator.prepare(model, optimizer, ...)` call, after "
            "building both, and use what it returns")


def read_facts(d: Path, ranks: list[int]) -> dict[int, dict[str, Any]]:
    out = {}
    for r in ranks:
        p = d / f"rank-{r}.json"
        if p.is_file():
            out[r] = json.loads(p.read_text())
    return out


def analyse(arts: Artefacts, facts: dict[int, dict], ranks: list[int], own_trainer: bool) -> list[Finding]:
    missing = [r for r in ranks if r not in facts]
    out: list[Finding] = []
    if missing:
        out.append(fault("rehearsal", ", ".join(f"rank {r}" for r in missing), "wrote no report (it failed or was killed)",
                         "see the rank's output above; fix the error and run tuner check again"))
    stuck, explained = collectives.judge(facts)
    for r, f in sorted(facts.items()):
        if f.get("observer_errors"):
            out.append(fault("rehearsal", f"rank {r}", "tuner check's observer failed (a bug in tuner check; the "
                             f"script went on): {f['observer_errors'][0]}",
                             "report it; --skip the check it names, or run tuner launch without --check"))
        if f.get("error") and r not in explained:  # a collective's timeout: `collectives` names it
            out.append(fault("rehearsal", f"rank {r}", f"the script failed: {f['error'][:300]}",
                             "fix the error shown in the rank's output"))
    if not facts:
        return out
    out += stuck
    runs = {r: [run for run in f["runs"] if run["accelerator"] is not None or run["backwards"]] for r, f in facts.items()}
    if not runs or not any(runs.values()):
        out.append(fault("rehearsal", "all", "no Accelerator was built and nothing was trained",
                         "the script must train with accelerate (or the HF Trainer) for tuner check to see it"))
        return out
    n = max(len(v) for v in runs.values())
    for i in range(n):
        per_rank = {r: v[i] for r, v in runs.items() if i < len(v)}
        label = "" if n == 1 else f" (Accelerator {i + 1} of {n})"
        found = _one_run(arts, per_rank, own_trainer)
        for finding in found:
            finding.saw += label
            finding.run = i + 1 if n > 1 else 0
        out += found
    return out


def _one_run(arts: Artefacts, runs: dict[int, dict], own_trainer: bool) -> list[Finding]:
    out: list[Finding] = []
    for check in (_world, _dist_type, _prepared, _sharding, _data, _trainable, _optimizer, _steps, _changed, _grads,
                  _loss, _lr, _ds_batch, _precision, _dtypes):
        out += check(arts, runs)
    out += samples.judge_packing(runs) + saves.judge(runs) + saves.judge_ema(runs)
    out += samples.judge_resume(runs, arts.settings.training.gradient_accumulation_steps)
    out += losses.judge(runs, arts.plan.data_parallel_size)
    return out + memory(arts, runs, own_trainer) + schedule(arts, runs, own_trainer)


def _world(arts: Artefacts, runs) -> list[Finding]:
    want = arts.plan.world_size
    bad = []
    for r, run in runs.items():
        for what in ("accelerator", "partial_state"):
            v = run.get(what)
            if v and (v["num_processes"] != want or v["process_index"] != r):
                name = "Accelerator" if what == "accelerator" else "PartialState"
                bad.append(fault("world-size", f"rank {r}", f"{name} sees rank {v['process_index']} of "
                                 f"{v['num_processes']}; the plan is rank {r} of {want}",
                                 "do not reset RANK/WORLD_SIZE/LOCAL_RANK or build the process group yourself; start "
                                 "the script with `tuner launch` (or accelerate launch) on every machine"))
    return bad or [ok("world-size", "all", f"{len(runs)} ranks each see a world of {want}")]


def _dist_type(arts: Artefacts, runs) -> list[Finding]:
    from ..cpu_shim import accepted_types, cpu_type

    accepted = accepted_types(arts.plan.distributed_type) if arts.plan.platform == "cpu" else {arts.plan.distributed_type}
    bad = [fault("distributed-type", f"rank {r}", f"accelerate runs {run['accelerator']['distributed_type']}; the plan "
                 f"is {cpu_type(arts.plan.distributed_type)}",
                 "do not pass cpu=True or your own plugins that switch the strategy off; launch with the build's "
                 "accelerate.yaml (tuner launch does)")
           for r, run in runs.items() if run.get("accelerator") and run["accelerator"]["distributed_type"] not in accepted]
    return bad or [ok("distributed-type", "all", " / ".join(sorted(accepted)))]


def _prepared(arts: Artefacts, runs) -> list[Finding]:
    r, run = next(iter(runs.items()))
    p = run["prepared"]
    saw = f"prepare got {p['models']} model(s), {p['optimizers']} optimizer(s), {p['dataloaders']} data loader(s)"
    if run["backwards"] and not p["models"]:
        return [fault("prepared", "all", saw + "; the model trained is not the prepared one",
                      "pass the model to accelerator.prepare and train the model it returns: without it the model is "
                      "neither wrapped nor sharded, and gradients are not synchronised")]
    if run["backwards"] and not p["optimizers"] and run["steps"]:
        return [fault("prepared", "all", saw + "; the optimizer that steps was not prepared",
                      "pass the optimizer to accelerator.prepare together with the model")]
    return [ok("prepared", "all", saw)]


def _sharding(arts: Artefacts, runs) -> list[Finding]:
    strategy, world = arts.plan.strategy, arts.plan.world_size
    if strategy.zero_stage in (1, 2) and world > 1:  # optimizer state partitioned, parameters whole
        return _zero_partition(strategy, world, runs)
    if not strategy.is_sharded or world < 2:
        return [skipped("sharding", "all", f"{strategy}: every rank holds the whole model, as planned")]
    want_kind = {Strategy.FSDP2: "DTensor", Strategy.FSDP1: "FlatParameter", Strategy.ZERO3: "ZeRO-3"}[strategy]
    out = []
    for r, run in runs.items():
        m = run.get("model")
        if m is None:
            out.append(fault("sharding", f"rank {r}", "no prepared model to look at",
                             "pass the model to accelerator.prepare"))
            continue
        share = m["local_numel"] / max(1, m["numel"])
        if m["kinds"].get(want_kind, 0) == 0 or share > 1.0 / world + 0.25:
            kinds = ", ".join(f"{v} {k}" for k, v in sorted(m["kinds"].items()))
            out.append(fault("sharding", f"rank {r}", f"{m['type']} holds {share:.0%} of its {m['numel']:,} parameters "
                             f"({kinds}); {strategy} on {world} ranks should hold about {1 / world:.0%} as {want_kind}",
                             "launch with the build's config (FSDP/DeepSpeed must reach accelerate) and pass the model "
                             "to accelerator.prepare; an FSDP config the script overrides is ignored silently"))
    return out or [ok("sharding", "all", f"each rank holds about 1/{world} of the parameters as {want_kind}")]


def _zero_partition(strategy: Strategy, world: int, runs) -> list[Finding]:
    out = []
    for r, run in runs.items():
        ds, m = run.get("ds"), run.get("model")
        if ds is None or m is None or not ds.get("partition"):
            out.append(fault("sharding", f"rank {r}", f"no ZeRO optimizer partition ({m['type'] if m else 'no model'})",
                             "pass the model and the optimizer to accelerator.prepare under the build's DeepSpeed config"))
            continue
        share = ds["partition"] / max(1, m["trainable"])
        if share > 1.0 / world + 0.25:
            out.append(fault("sharding", f"rank {r}", f"the optimizer partition holds {share:.0%} of the trainable "
                             f"parameters; {strategy} on {world} ranks should hold about {1 / world:.0%}",
                             "launch with the build's deepspeed.json (tuner launch does)"))
    return out or [ok("sharding", "all", f"each rank's optimizer partition holds about 1/{world} of the parameters")]


def _data(arts: Artefacts, runs) -> list[Finding]:
    if len(runs) < 2:
        return [skipped("data-sharded", "all", "one rank on this machine")]
    by_identity = samples.judge(runs, arts.plan.data_parallel_size)
    if by_identity and by_identity[0].status == "fault":
        return by_identity
    by_batches = _same_batches(runs)
    if by_identity and by_batches[0].status != "fault":
        return by_identity
    return by_batches


def _same_batches(runs) -> list[Finding]:
    """The first batches' fingerprints (data without an index: iterable data sets)."""
    seen: dict[str, int] = {}
    for r, run in sorted(runs.items()):
        for b in run["batches"]:
            if b in seen and seen[b] != r:
                return [fault("data-sharded", f"rank {seen[b]}, rank {r}", "got the same batch: every rank reads the "
                              "same data, so the world trains on one rank's worth",
                              "pass the DataLoader to accelerator.prepare (or use a DistributedSampler) so each rank "
                              "gets its own shard")]
            seen.setdefault(b, r)
    if not seen:
        return [skipped("data-sharded", "all", "no batch reached a prepared model")]
    return [ok("data-sharded", "all", f"{len(seen)} batches, all different across ranks")]


def _trainable(arts: Artefacts, runs) -> list[Finding]:
    r, run = next(iter(runs.items()))
    m = run.get("model")
    if m is None:
        return [skipped("trainable", "all", "no prepared model")]
    share = m["trainable"] / max(1, m["numel"])
    kind = arts.settings.model.type
    if m["trainable"] == 0:
        return [fault("trainable", "all", f"none of the {m['numel']:,} parameters requires grad",
                      "set requires_grad=True on what should train (or attach the LoRA adapters) before prepare")]
    if kind == "full" and share < 0.5:
        return [fault("trainable", "all", f"only {share:.1%} of the parameters are trainable; the plan trains the full "
                      "model (model.type = full)",
                      "unfreeze the model (requires_grad=True), or compile with model.type = lora if that is intended")]
    return [ok("trainable", "all", f"{share:.1%} of {m['numel']:,} parameters trainable ({kind})")]


def _optimizer(arts: Artefacts, runs) -> list[Finding]:
    out = []
    for r, run in runs.items():
        o = run.get("optimizer")
        if o is None or "trainable_in_model" not in o:
            continue
        if o["foreign"] and not o["trainable_held"]:
            out.append(fault("optimizer-params", f"rank {r}", f"the optimizer holds {o['params']} tensors, none of "
                             "them the prepared model's parameters (stale: built before the model was wrapped)", FSDP_FIX))
        elif o["trainable_held"] < o["trainable_in_model"]:
            out.append(fault("optimizer-params", f"rank {r}", f"{o['trainable_in_model'] - o['trainable_held']} of "
                             f"{o['trainable_in_model']} trainable parameters are not in the optimizer (never updated)",
                             "build the optimizer after setting requires_grad, from [p for p in model.parameters() "
                             "if p.requires_grad]"))
        elif o["frozen_held"]:
            out.append(fault("optimizer-params", f"rank {r}", f"the optimizer holds {o['frozen_held']} frozen "
                             "parameters (requires_grad=False)",
                             "build the optimizer from the trainable parameters only; frozen ones cost optimizer "
                             "memory and break FSDP's flat parameters"))
        break
    if out:
        return out
    o = next((run["optimizer"] for run in runs.values() if run.get("optimizer")), None)
    if o is None:
        return [skipped("optimizer-params", "all", "no optimizer step")]
    if "trainable_in_model" not in o:
        return [ok("optimizer-params", "all", f"{o['type']} holds the engine's partitions")]
    return [ok("optimizer-params", "all", f"{o['type']} holds all {o['trainable_in_model']} trainable parameters")]


def _steps(arts: Artefacts, runs) -> list[Finding]:
    r, run = next(iter(runs.items()))
    if run["backwards"] and not run["steps"]:
        return [fault("optimizer-step", "all", f"{run['backwards']} backward passes and no optimizer step: nothing is "
                      "learned", "call optimizer.step() (and optimizer.zero_grad()) after accelerator.backward(loss)")]
    accum = arts.settings.training.gradient_accumulation_steps
    if accum > 1 and run.get("ds") is None and run["backwards"] >= accum and run["steps"] * accum > run["backwards"]:
        return [fault("optimizer-step", "all", f"{run['steps']} optimizer steps in {run['backwards']} backward passes; "
                      f"the settings accumulate {accum} micro-batches per step (training.gradient_accumulation_steps)",
                      "wrap each micro-step in `with accelerator.accumulate(model):` (and build the Accelerator with "
                      f"gradient_accumulation_steps={accum}), or recompile with the accumulation you run")]
    stale = [r for r, run in runs.items() if run["stale_grads"]]
    if stale:
        return [fault("optimizer-step", f"rank {stale[0]}", "gradients from the previous step were still there at the "
                      "next backward: they add up across steps",
                      "call optimizer.zero_grad() after optimizer.step() (or use accelerator.accumulate for "
                      "accumulation)")]
    if not run["steps"]:
        return [skipped("optimizer-step", "all", "no backward pass")]
    return [ok("optimizer-step", "all", f"{run['steps']} optimizer steps")]


def _changed(arts: Artefacts, runs) -> list[Finding]:
    for r, run in runs.items():
        if run.get("changed") is False:
            return [fault("params-change", f"rank {r}", "the optimizer's parameters did not change in a step",
                          "check the learning rate, that gradients reach the parameters the optimizer holds, and "
                          "that the step is not skipped (fp16 loss scaling skips steps with inf gradients)")]
    if any(run.get("changed") for run in runs.values()):
        return [ok("params-change", "all", "parameters move with the steps")]
    return [skipped("params-change", "all", "no optimizer step")]


def _grads(arts: Artefacts, runs) -> list[Finding]:
    out = []
    seen = False
    for r, run in runs.items():
        norms = run.get("ds_grad_norms") or []
        bad_norm = [n for n in norms if isinstance(n, str) or not math.isfinite(n)]
        for g in run["grads"]:
            seen = True
            if not g["finite"] or bad_norm:
                out.append(fault("grads", f"rank {r}", "non-finite (NaN/inf) gradients",
                                 "check the loss and the inputs (NaN), the precision (fp16 overflow) and the learning "
                                 "rate; gradient clipping (training.max_grad_norm) does not repair NaN"))
                break
            if not g["with_grad"] or not g["nonzero"]:
                what = "no gradients" if not g["with_grad"] else "all-zero gradients"
                out.append(fault("grads", f"rank {r}", f"{what} on the {g['params']} parameters the optimizer holds",
                                 "the loss must depend on the trainable parameters through differentiable ops "
                                 "(no .detach(), no torch.no_grad around the forward), and the optimizer must hold "
                                 "the prepared model's parameters"))
                break
        if out:
            break
    if out:
        return out
    return [ok("grads", "all", "finite and non-zero")] if seen else [skipped("grads", "all", "no optimizer step")]


def _loss(arts: Artefacts, runs) -> list[Finding]:
    for r, run in runs.items():
        bad = [x for x in run["losses"] if not math.isfinite(x)]
        if bad:
            return [fault("loss", f"rank {r}", f"loss {bad[0]} at backward {run['losses'].index(bad[0]) + 1}",
                          "look for NaN in the data, log(0) / division by zero in the loss, or fp16 overflow")]
    losses = [x for run in runs.values() for x in run["losses"]]
    return [ok("loss", "all", f"finite ({min(losses):.4g}..{max(losses):.4g})")] if losses else \
        [skipped("loss", "all", "no backward pass")]


def _lr(arts: Artefacts, runs) -> list[Finding]:
    r, run = next(iter(runs.items()))
    if not run["lr"]:
        return [skipped("lr", "all", "no optimizer step")]
    if max(run["lr"]) <= 0:
        return [fault("lr", "all", f"learning rate {run['lr']} at every rehearsed step: parameters never move",
                      "set a positive learning rate; check the scheduler (warmup from 0 must rise after step 1)")]
    return [ok("lr", "all", "steps at lr " + ", ".join(f"{x:.3g}" for x in run["lr"]))]


def _ds_batch(arts: Artefacts, runs) -> list[Finding]:
    r, run = next(iter(runs.items()))
    ds = run.get("ds")
    if ds is None:
        return [skipped("batch-arithmetic", "all", "not DeepSpeed")]
    s = arts.settings.training
    if ds["micro"] * ds["accumulation"] * ds["world"] != ds["train_batch"]:
        return [fault("batch-arithmetic", "all", f"micro {ds['micro']} x accumulation {ds['accumulation']} x world "
                      f"{ds['world']} != train batch {ds['train_batch']}", "recompile the build; do not edit deepspeed.json")]
    if ds["train_batch"] != arts.plan.global_batch_size or ds["micro"] != s.micro_batch_size:
        return [fault("batch-arithmetic", "all", f"DeepSpeed trains with micro batch {ds['micro']} (global "
                      f"{ds['train_batch']}); the settings say {s.micro_batch_size} (global {arts.plan.global_batch_size})",
                      "let the build's deepspeed.json decide, or recompile with the batch you mean")]
    sizes = {b for run in runs.values() for b in run["batch_sizes"]}
    if sizes and sizes != {ds["micro"]}:
        return [fault("batch-arithmetic", "all", f"the data loader gives batches of {sorted(sizes)}; DeepSpeed counts "
                      f"{ds['micro']} per rank (its LR schedule, throughput and accumulation assume it)",
                      f"make the DataLoader's batch_size {ds['micro']} (training.micro_batch_size), or recompile with "
                      f"training.micro_batch_size = {sorted(sizes)[0]}")]
    return [ok("batch-arithmetic", "all", f"{ds['micro']} x {ds['accumulation']} x {ds['world']} = {ds['train_batch']}")]


def _precision(arts: Artefacts, runs) -> list[Finding]:
    want = arts.settings.training.mixed_precision
    r, run = next(iter(runs.items()))
    ds = run.get("ds")
    if ds is not None:
        have = "bf16" if ds["bf16"] else "fp16" if ds["fp16"] else "no"
    elif run.get("accelerator"):
        have = run["accelerator"]["mixed_precision"]
    else:
        return [skipped("mixed-precision", "all", "no Accelerator")]
    if have != want:
        return [fault("mixed-precision", "all", f"training runs with mixed precision {have!r}; the settings say {want!r}",
                      "do not pass mixed_precision (or bf16/fp16 TrainingArguments) that differ from the build, or "
                      f"recompile with training.mixed_precision = {have!r}")]
    if want != "no" and ds is None and not arts.plan.strategy.is_fsdp and run["autocast"] \
            and not any(run["autocast"]):
        return [fault("mixed-precision", "all", f"{want} is set but the forward ran without autocast",
                      "call the model accelerator.prepare returned (its forward runs under autocast)")]
    return [ok("mixed-precision", "all", have)]


def _dtypes(arts: Artefacts, runs) -> list[Finding]:
    if not arts.plan.uses_fsdp:
        return [skipped("dtypes", "all", "not FSDP")]
    r, run = next(iter(runs.items()))
    dtypes = run.get("dtypes") or []
    if len(dtypes) > 1:
        return [fault("dtypes", "all", f"the model passed to prepare has parameters in {', '.join(dtypes)}",
                      "cast the model to one dtype before prepare (model.to(torch.float32)); FSDP flattens/communicates "
                      "per dtype and mixed precision expects one")]
    return [ok("dtypes", "all", ", ".join(dtypes) or "no model")]
