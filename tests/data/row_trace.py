"""A trainer callback for the data tests: each rank's trained rows (a hash per row, by step,
and the batch itself: input ids, labels, position ids, so a test can read the loss mask the
ranks trained with) and its logged metrics, written to ``$TUNER_TEST_ROWS_DIR/rank{N}.json``
at the end. Meant for a few small batches.

    tuner run SETTINGS --callback tests.data.row_trace:rows
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from tuner.runtime.callbacks import TrainerCallback

ROWS = "tests.data.row_trace:rows"


def row_key(ids) -> str:
    return hashlib.sha1(json.dumps([int(x) for x in ids]).encode()).hexdigest()[:16]


class RowTrace(TrainerCallback):
    def __init__(self) -> None:
        self.out = Path(os.environ["TUNER_TEST_ROWS_DIR"])
        self.data: dict = {"batches": [], "metrics": []}

    def on_batch_start(self, trainer, batch) -> None:
        ids = batch["input_ids"].cpu()
        self.data["batches"].append({"step": trainer.step + 1, "rows": [row_key(r) for r in ids],
                                     "has_position_ids": "position_ids" in batch, "input_ids": ids.tolist(),
                                     "labels": batch["labels"].cpu().tolist(),
                                     "position_ids": batch["position_ids"].cpu().tolist() if "position_ids" in batch
                                     else None})

    def on_step_end(self, trainer, metrics) -> None:
        if metrics:
            self.data["metrics"].append(dict(metrics, step=trainer.step))

    def on_train_end(self, trainer) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / f"rank{trainer.rank}.json").write_text(json.dumps(self.data), encoding="utf-8")


def rows() -> RowTrace:
    return RowTrace()
