"""Trainer callbacks the tests (and bench/) give `tuner run` with ``--callback``.

    tuner run SETTINGS --callback tests.runtime.trace_callbacks:trace        # TUNER_TEST_TRACE_DIR
    tuner run SETTINGS --callback tests.runtime.trace_callbacks:slow_save    # TUNER_TEST_SAVE_DELAY_S

Every rank imports this module, so the repository root must be on the ranks' PYTHONPATH
(`runtime_helpers.tuner_env` puts it there). The trainer itself knows nothing of tests:
these use its public callback interface (tuner/runtime/callbacks.py).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
from tuner.runtime.callbacks import TrainerCallback
from tuner.runtime.memory import rank_state_bytes

#: The spec that names `trace` (tests and bench pass it to `tuner run --callback`).
TRACE = "tests.runtime.trace_callbacks:trace"
SLOW_SAVE = "tests.runtime.trace_callbacks:slow_save"


def row_keys(batch: dict[str, torch.Tensor]) -> list[int]:
    """A hash per sample of a batch (for the data-sharding test)."""
    first = next(iter(batch.values()))
    return [hash(tuple(row.flatten()[:64].tolist())) for row in first]


class Trace(TrainerCallback):
    """Writes ``OUT/rank{N}.json``: the rank's world, parameter counts, the sample hashes of its
    first epoch, what it holds after training, its losses and a causal LM's logits."""

    def __init__(self, out_dir: str | Path) -> None:
        self.out_dir = Path(out_dir)
        self.data: dict = {"rows": []}

    def on_train_begin(self, trainer) -> None:
        from torch.distributed.tensor import DTensor

        params = list(trainer.acc.unwrap_model(trainer.model).parameters())
        self.data.update(total_params=trainer.param_counts["total"], local_params=trainer.param_counts["local"],
                         dtensor_params=sum(isinstance(p, DTensor) for p in params), n_params=len(params))

    def on_batch_start(self, trainer, batch) -> None:
        if trainer.epoch == 0:
            self.data["rows"].extend(row_keys(batch))

    def on_train_end(self, trainer) -> None:
        # Before any forward pass: FSDP2 leaves the root module's parameters unsharded after
        # one, which would overstate what a rank holds while training.
        self.data["state_bytes"] = rank_state_bytes(trainer.model, trainer.optimizer)
        # The training peak of this rank's GPU memory (bench/gpu_acceptance.py), before export.
        cuda = torch.cuda.is_available()
        self.data["cuda_max_memory_allocated"] = torch.cuda.max_memory_allocated() if cuda else None
        if trainer.s.model.family == "causal_lm":
            self.data["logits"] = _logits(trainer)
        acc = trainer.acc
        self.data.update(rank=trainer.rank, process_index=acc.process_index, num_processes=trainer.world,
                         is_main=trainer.main, distributed_type=acc.distributed_type.name, losses=trainer.losses)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / f"rank{trainer.rank}.json").write_text(json.dumps(self.data), encoding="utf-8")


def _logits(trainer) -> list:
    """Logits of the trained, still-sharded model on one fixed batch (the first two rows)."""
    batch = trainer.data.collate([trainer.train_ds[i] for i in range(2)])
    batch = {k: v.to(trainer.acc.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    trainer.model.eval()
    with torch.no_grad():
        out = trainer.model(input_ids=batch["input_ids"])
    trainer.model.train()
    return out.logits.float().cpu()[:, :4, :8].tolist()


class SlowSave(TrainerCallback):
    """Widens the window of a checkpoint save in progress (a kill can land in it)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_save(self, trainer, partial_dir) -> None:
        time.sleep(self.seconds)


def trace() -> Trace:
    return Trace(os.environ["TUNER_TEST_TRACE_DIR"])


def slow_save() -> SlowSave:
    return SlowSave(float(os.environ.get("TUNER_TEST_SAVE_DELAY_S", "5")))
