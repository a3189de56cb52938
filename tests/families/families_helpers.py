"""Helpers for the family tests: run an example settings file with `tuner run`, as a user would.

Each run copies an example from examples/ into its own folder (so concurrent builds never
share examples/build/), applies ``--set`` overrides, and starts real gloo ranks through
``python -m tuner run``.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from tests import harness
from tests.run_result import Run

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def env() -> dict:
    return harness.env()


def run_example(example: str, d: Path, *sets: str, args: tuple[str, ...] = (), timeout: float = 400) -> Run:
    """`tuner run` the example `example` (a file name under examples/) in folder `d`."""
    d.mkdir(parents=True, exist_ok=True)
    target = d / "settings.toml"
    shutil.copy(EXAMPLES / example, target)
    overrides = [x for s in ("output.dir=out", "hardware.platform=cpu", *sets) for x in ("--set", s)]
    t0 = time.monotonic()
    proc = harness.tuner("run", str(target), *overrides, *args, cwd=d, timeout=timeout)
    return Run(d, proc, time.monotonic() - t0)


def decreasing(losses: dict[int, float], k: int = 4) -> tuple[float, float]:
    """(mean of the first k losses, mean of the last k)."""
    vals = [losses[s] for s in sorted(losses)]
    return sum(vals[:k]) / k, sum(vals[-k:]) / k
