"""Which samples each rank reads (`data-sharded`, decided from sample identity).

The observer (observer.py) wraps torch's DataLoader iterators: for every iterator it notes
which dataset it reads (its length and a hash of its first and last sample: two ranks that
build the same data, from the same file or the same seed, have the same identity), how many
samples one epoch gives this rank (the index sampler's length x its batch size: a loader that
went through `accelerator.prepare` or a `DistributedSampler` gives about 1/world of them),
and the indices it fetched first. A loader counts when its batch reaches a prepared model's
forward in training (grad on, model.train()): evaluation loaders and a script's own
reference loops are not judged.

`judge` compares the ranks: the same dataset read whole by every rank (each rank iterates
every sample, whatever the shuffle or seed: the world trains on one rank's worth), or
sharded twice (a `DistributedSampler` loader passed to `prepare` again: each rank reads
1/world^2, the rest is never seen).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from .findings import Finding, fault, ok, skipped

INDICES = 256  # indices noted per iterator (the first batches)
_iters: dict[int, dict[str, Any]] = {}  # id(iterator) -> its record
_last: list[dict[str, Any]] = []  # the record whose batch was fetched last
_get_run: list[Callable[[], dict]] = []


def install(get_run: Callable[[], dict], safe) -> None:
    """Wrap DataLoader iteration; `get_run` returns the observer's current run."""
    from torch.utils.data import dataloader

    _get_run.append(get_run)
    original = dataloader._BaseDataLoaderIter._next_index

    def _next_index(self):
        index = original(self)
        safe(_note)(self, index)
        return index

    dataloader._BaseDataLoaderIter._next_index = _next_index


def _note(it, index) -> None:
    rec = _iters.get(id(it))
    if rec is None or rec["it"] is not it:
        rec = {"it": it, "facts": _facts(it)}
        _iters[id(it)] = rec
        _get_run[0]().setdefault("loaders", []).append(rec["facts"])
    facts = rec["facts"]
    facts["fetched"] += 1
    got = facts["indices"]
    if len(got) < INDICES:
        flat = index if isinstance(index, (list, tuple)) else [index]
        got += [int(i) for i in flat if isinstance(i, int)][: INDICES - len(got)]
    _last[:] = [facts]


def _facts(it) -> dict[str, Any]:
    dataset, sampler = it._dataset, it._index_sampler
    facts: dict[str, Any] = {"dataset": None, "length": None, "epoch_samples": None, "indices": [], "train": False,
                             "samplers": _sampler_chain(sampler), "fetched": 0, "trained_at": None, "batches": None}
    try:
        n = len(dataset)
        facts["length"] = n
        facts["dataset"] = f"{n}:{_sample_hash(dataset[0])}:{_sample_hash(dataset[n - 1])}" if n else None
    except Exception:  # noqa: BLE001 - an iterable or unsized dataset: no identity by index
        pass
    try:
        batch = int(getattr(sampler, "batch_size", None) or 1)
        if getattr(sampler, "split_batches", False):  # accelerate's split_batches: each rank takes a slice
            batch = max(1, batch // max(1, int(getattr(sampler, "num_processes", 1))))
        facts["epoch_samples"] = len(sampler) * batch
        facts["batches"] = len(sampler)
    except Exception:  # noqa: BLE001 - an infinite sampler
        pass
    return facts


def _sampler_chain(sampler) -> list[str]:
    out = []
    for _ in range(4):
        if sampler is None:
            break
        out.append(type(sampler).__name__)
        sampler = getattr(sampler, "batch_sampler", None) or getattr(sampler, "sampler", None)
    return out


def _sample_hash(value) -> str:
    h = hashlib.sha1()

    def walk(v):
        if hasattr(v, "detach"):
            h.update(v.detach().float().cpu().contiguous().numpy().tobytes())
        elif hasattr(v, "tobytes"):
            h.update(v.tobytes())
        elif isinstance(v, dict):
            for k in sorted(v, key=str):
                h.update(str(k).encode())
                walk(v[k])
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        else:
            h.update(repr(v).encode())

    walk(value)
    return h.hexdigest()[:12]


def feeding(module) -> None:
    """A prepared model's forward: the last fetched batch trains when grad is on."""
    import torch

    if _last and torch.is_grad_enabled() and getattr(module, "training", False):
        _last[0]["train"] = True
        if _last[0]["trained_at"] is None:
            _last[0]["trained_at"] = _last[0]["fetched"]


def resumed(run: dict, acc) -> None:
    """After `Accelerator.load_state`: the optimizer steps the checkpoint holds, and which
    loaders existed before (the first training loader after it is judged)."""
    steps = 0.0
    for opt in getattr(acc, "_optimizers", []):
        inner = getattr(opt, "optimizer", opt)
        for state in getattr(inner, "state", {}).values():
            if isinstance(state, dict) and "step" in state:
                steps = max(steps, float(state["step"]))
    run["resumed"] = {"steps": int(steps), "loaders_before": len(run.get("loaders") or [])}


def judge_resume(runs: dict[int, dict], accum: int) -> list[Finding]:
    for r, run in sorted(runs.items()):
        res = run.get("resumed")
        if not res:
            continue
        after = [f for f in (run.get("loaders") or [])[res["loaders_before"]:] if f["train"] and f["batches"]]
        if not after or not res["steps"]:
            return [skipped("resume", f"rank {r}", "resumed, but no training batch (or no optimizer step) to place")]
        f = after[0]
        if "SkipBatchSampler" in f["samplers"]:
            return [ok("resume", f"rank {r}", f"resumed at optimizer step {res['steps']}: the loader skips the batches "
                       "already trained (skip_first_batches)")]
        done = res["steps"] * max(1, accum) % f["batches"]
        ahead = 1 if "BatchSamplerShard" in f["samplers"] else 0  # accelerate's loader fetches one batch ahead
        passed_over = max(0, (f["trained_at"] or 1) - 1 - ahead)  # batches a loop skipped (`continue`)
        if done and passed_over < done:
            return [fault("resume", f"rank {r}", f"load_state resumed at optimizer step {res['steps']}, {done} batches "
                          f"into an epoch of {f['batches']} on each rank, but training after it starts at batch {passed_over} of "
                          "the epoch: the epoch starts over (its first batches are trained again, in the order the "
                          "restored RNG draws, and its last ones never)",
                          f"skip what the epoch already trained: accelerator.skip_first_batches(dataloader, {done}) for "
                          "the resumed epoch only, or Accelerator(dataloader_config=DataLoaderConfiguration("
                          "use_stateful_dataloader=True)), whose save_state/load_state keep the position")]
        return [ok("resume", f"rank {r}", f"resumed at optimizer step {res['steps']}: the data continues from batch "
                   f"{done} of {f['batches']}")]
    return [skipped("resume", "all", "no accelerator.load_state in the rehearsal")]


def packing(run: dict, kwargs: dict) -> None:
    """A packed batch: position_ids restart inside a row (several documents per row), read over
    the tokens the attention mask keeps. Notes whether a 2-D attention_mask came with it."""
    pos, mask = kwargs.get("position_ids"), kwargs.get("attention_mask")
    if pos is None or not hasattr(pos, "dim") or pos.dim() != 2 or pos.shape[-1] < 2:
        return
    has_mask = mask is not None and hasattr(mask, "dim") and mask.dim() == 2 and mask.shape == pos.shape
    for i in range(min(int(pos.shape[0]), 64)):
        row = pos[i]
        if has_mask and mask is not None:
            row = row[mask[i].bool()]
        if row.numel() > 1 and bool(((row[1:] - row[:-1]) != 1).any()):
            run.setdefault("packed", []).append({"attention_mask": bool(has_mask)})
            return


def judge_packing(runs: dict[int, dict]) -> list[Finding]:
    packed = [(r, p) for r, run in sorted(runs.items()) for p in run.get("packed") or []]
    if not packed:
        return [skipped("packing", "all", "no packed rows (position_ids restarting inside a row) reached the model")]
    masked = [r for r, p in packed if p["attention_mask"]]
    if masked:
        return [fault("packing", f"rank {masked[0]}", "the batches pack several documents per row (position_ids restart "
                      "inside a row) and also pass a 2-D attention_mask: transformers then builds one causal mask over "
                      "the whole row (it reads document boundaries from position_ids only when attention_mask is None), "
                      "so every token attends to the documents packed before it",
                      "drop attention_mask from packed batches and keep position_ids (transformers then masks per "
                      "document), e.g. DataCollatorWithFlattening or trl's padding_free, or do not pack")]
    return [ok("packing", "all", "packed rows attend per document (position_ids without an attention_mask)")]


def judge(runs: dict[int, dict], world: int) -> list[Finding] | None:
    """Findings from the training loaders' sample identities, or None when no rank's training
    loader has a sized dataset (the batch fingerprints decide then). `world`: the data-parallel
    size (the ranks of one context-parallel group read the same samples, by design)."""
    per_rank = {r: [f for f in run.get("loaders") or [] if f["train"] and f["dataset"]] for r, run in runs.items()}
    datasets = {f["dataset"] for fs in per_rank.values() for f in fs}
    if not datasets or len(runs) < 2:
        return None
    for ds in sorted(datasets):
        mine = {r: next(f for f in fs if f["dataset"] == ds) for r, fs in per_rank.items()
                if any(f["dataset"] == ds for f in fs)}
        if len(mine) < 2:
            continue
        n = next(iter(mine.values()))["length"]
        epochs = {r: f["epoch_samples"] for r, f in mine.items() if f["epoch_samples"] is not None}
        where = ", ".join(f"rank {r}" for r in sorted(mine))
        if len(epochs) == len(mine) and all(e >= n for e in epochs.values()) and world > 1:
            shared = set.intersection(*(set(f["indices"]) for f in mine.values()))
            also = f"; both read sample #{min(shared)} in their first batches" if shared else ""
            return [fault("data-sharded", where, f"every rank reads all {n:,} samples of the same data set in one epoch "
                          f"(each rank's loader gives {min(epochs.values()):,} per epoch{also}): the world trains on one "
                          "rank's worth of data, each sample once per rank, whatever the shuffle or seed",
                          "pass the DataLoader to accelerator.prepare (it shards by rank and keeps one shuffle order "
                          "on every rank), or give it a DistributedSampler(num_replicas=world, rank=rank)")]
        chains = [c for f in mine.values() for c in f["samplers"]]
        if len(epochs) == len(mine) and sum(epochs.values()) < 0.75 * n and "DistributedSampler" in chains \
                and "BatchSamplerShard" in chains:
            return [fault("data-sharded", where, f"the ranks together read {sum(epochs.values()):,} of the {n:,} "
                          f"samples per epoch: a DistributedSampler's loader was passed to accelerator.prepare, which "
                          f"shards it again (each rank reads about 1/{world * world})",
                          "drop the DistributedSampler (accelerator.prepare shards the loader), or do not prepare a "
                          "loader you sharded yourself")]
    return [ok("data-sharded", "all", f"each rank reads its own share of the training data ({len(datasets)} data "
               "set(s), by sample identity)")]
