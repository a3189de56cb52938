"""Rank-divergent faults for tests/reliability/processes/fault_runs.py (test_rank_faults_that_end.py,
test_rank_faults_that_hang.py): a callback module a test copies into its project folder and
names with ``tuner run --callback rank_faults:Fault``.
``TUNER_TEST_FAULT`` picks the fault; the rank that injects it first writes ``fault.time``
(when) into the project folder, so that the test measures from the fault to the run's end.
``TUNER_TEST_FAULT_STEP`` (default 3) is the step it strikes at. (``partial_checkpoint`` is not
injected here: the test lays the checkpoints out before the run.)"""

from __future__ import annotations

import errno
import os
import signal
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

FAULT = os.environ.get("TUNER_TEST_FAULT", "")
AT_STEP = int(os.environ.get("TUNER_TEST_FAULT_STEP", "3"))


def _mark() -> None:
    Path("fault.time").write_text(str(time.time()))


class Fault:
    def on_save(self, trainer, partial_dir) -> None:
        if FAULT == "save_raise" and dist.get_rank() == 0:
            _mark()
            raise RuntimeError("injected: rank 0 fails while saving")
        if FAULT == "disk_full" and dist.get_rank() == 1:
            _mark()
            raise OSError(errno.ENOSPC, "No space left on device", str(partial_dir))

    def on_batch_start(self, trainer, batch) -> None:
        rank = dist.get_rank()
        if trainer.step + 1 != AT_STEP:
            return
        if FAULT == "nan" and rank == 1:
            _mark()
            with torch.no_grad():
                next(trainer.model.parameters()).fill_(float("nan"))
        if FAULT == "out_of_data" and rank == 1:
            _mark()
            trainer.total_steps = trainer.step  # this rank's data ends here
        if FAULT == "data_error" and rank == 1:  # a row only rank 1 reads is bad: the person's error
            from tuner.runtime.data_sources.errors import DataError

            _mark()
            raise DataError("train.jsonl row 7", "injected: not a JSON object", "fix or remove that row")

    def on_step_end(self, trainer, metrics) -> None:
        rank = dist.get_rank()
        if trainer.step != AT_STEP:
            return
        if FAULT in ("sigkill", "sigkill_machine1") and rank == dist.get_world_size() - 1:
            _mark()
            os.kill(os.getpid(), signal.SIGKILL)
        if FAULT in ("sigstop", "sigstop_machine1") and rank == dist.get_world_size() - 1:
            _mark()
            os.kill(os.getpid(), signal.SIGSTOP)
        if FAULT == "slow_validation" and rank == 0:  # the person's own validation, on rank 0 only
            _mark()
            time.sleep(3600)
        if FAULT == "deadlock" and rank == 1:  # the person's code takes a lock it already holds
            _mark()
            lock = threading.Lock()
            lock.acquire()
            lock.acquire()
        if FAULT == "partial_collective" and rank == 0:  # a collective only rank 0 calls
            _mark()
            dist.all_reduce(torch.ones(7))
            dist.barrier()
