"""Callbacks: code of your own that runs inside tuner's trainer, on every rank.

A callback is any object with some of the methods of `TrainerCallback` (subclassing it is
the easy way: every method is a no-op there). The trainer calls each method of each
callback it was given, in order, with itself as the first argument, so a callback can read
`trainer.model`, `trainer.acc` (the `Accelerator`), `trainer.step`, `trainer.losses`...

Give callbacks to `tuner run` with ``--callback MODULE:NAME`` (repeatable). Every rank
imports MODULE (the run's project directory, where the settings file is, comes first on
``sys.path``) and takes NAME from it: a callback object, a class (instantiated with no
arguments), or a function returning a callback or a list of them. In Python, pass them to
`Trainer(arts, callbacks=[...])` or `tuner.runtime.worker.main(argv, callbacks=[...])`.

tuner's own tests use this to record what each rank holds and to slow a checkpoint down
(tests/runtime/trace_callbacks.py): nothing test-specific lives in the trainer.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from .artefacts import RunError

#: The trainer's events, in the order a run meets them.
EVENTS = ("on_train_begin", "on_batch_start", "on_step_end", "on_save", "on_train_end")


class TrainerCallback:
    """The events; override the ones you need. All run on every rank (use
    ``trainer.main`` for rank-0-only work) and must not return anything."""

    def on_train_begin(self, trainer: Any) -> None:
        """Model, optimizer and data prepared, checkpoint (if any) resumed; before the first step."""

    def on_batch_start(self, trainer: Any, batch: dict) -> None:
        """Before the forward pass of every micro-batch (``trainer.epoch`` is its epoch)."""

    def on_step_end(self, trainer: Any, metrics: dict | None) -> None:
        """After every optimizer step (``trainer.step``); `metrics` on logging steps, else None."""

    def on_save(self, trainer: Any, partial_dir: Any) -> None:
        """While a checkpoint is being saved: accelerate's state is written in `partial_dir`,
        which becomes ``checkpoints/step-N`` only after this returned on every rank."""

    def on_train_end(self, trainer: Any) -> None:
        """After the last optimizer step, before the final validation and the export: the
        model is still the prepared (sharded) one and no forward pass has run since training."""


class Callbacks:
    """The trainer's list of callbacks: ``callbacks.fire("on_step_end", trainer, metrics)``."""

    def __init__(self, callbacks: Iterable[Any] = ()) -> None:
        self.items = list(callbacks)

    def fire(self, event: str, *args: Any) -> None:
        assert event in EVENTS, event
        for cb in self.items:
            method = getattr(cb, event, None)
            if method is not None:
                method(*args)

    def __bool__(self) -> bool:
        return bool(self.items)


def load(spec: str) -> list[Any]:
    """The callbacks ``MODULE:NAME`` names (see the module docstring); `RunError` if it cannot."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise RunError(f"--callback {spec!r}: write it as MODULE:NAME (a callback, a class or a function)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RunError(f"--callback {spec}: cannot import {module_name} ({exc}); it must be importable "
                       f"from the project directory or PYTHONPATH") from None
    try:
        target = getattr(module, attr)
    except AttributeError:
        raise RunError(f"--callback {spec}: {module_name} has no {attr!r}") from None
    made = target() if callable(target) and not _is_callback(target) else target
    made = list(made) if isinstance(made, (list, tuple)) else [made]
    bad = [m for m in made if not _is_callback(m)]
    if bad:
        raise RunError(f"--callback {spec}: {type(bad[0]).__name__} is not a callback (it has none of "
                       f"{', '.join(EVENTS)})")
    return made


def _is_callback(obj: Any) -> bool:
    return not isinstance(obj, type) and any(callable(getattr(obj, e, None)) for e in EVENTS)
