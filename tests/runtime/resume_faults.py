"""Trainer callbacks that break a resume on purpose, to prove the continuation check fails
on the faults it is for (tests/runtime/test_portable_resume_matrix.py):

    tuner run ... --resume CKPT --callback tests.runtime.resume_faults:drop_optimizer_state
    tuner run ... --resume CKPT --callback tests.runtime.resume_faults:drop_schedule
    tuner run ... --resume CKPT --callback tests.runtime.resume_faults:drop_data_position

They run on every rank after the checkpoint is loaded (``on_train_begin``), through the
trainer's public callback interface.
"""

from __future__ import annotations

import warnings

from tuner.runtime.callbacks import TrainerCallback


class DropOptimizerState(TrainerCallback):
    """The resume loses Adam's moments and step count (as a resume that loads weights only)."""

    def on_train_begin(self, trainer) -> None:
        inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
        inner.state.clear()


class DropSchedule(TrainerCallback):
    """The resume starts the LR schedule over (as a resume that builds a new scheduler): torch's
    scheduler back at its first step, the optimizer's LR set from it (the warm-up's first LR)."""

    def on_train_begin(self, trainer) -> None:
        inner = getattr(trainer.scheduler, "scheduler", trainer.scheduler)
        inner.last_epoch = -1
        with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()"
            warnings.simplefilter("ignore")
            inner.step()


class DropDataPosition(TrainerCallback):
    """The resume starts the epoch over (the samples already trained are trained again)."""

    def on_train_begin(self, trainer) -> None:
        trainer.batches_in_epoch = 0


def drop_optimizer_state() -> DropOptimizerState:
    return DropOptimizerState()


def drop_schedule() -> DropSchedule:
    return DropSchedule()


def drop_data_position() -> DropDataPosition:
    return DropDataPosition()
