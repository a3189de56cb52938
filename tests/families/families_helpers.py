"""Helpers for the family tests: run an example settings file with `tuner run`, as a user would.

Each run copies an example from examples/ into its own folder (so concurrent builds never
share examples/build/), applies ``--set`` overrides, and starts real gloo ranks through
``python -m tuner run``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def env() -> dict:
    return {**os.environ, "TUNER_PG_TIMEOUT": "120", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@dataclass
class Run:
    dir: Path
    proc: subprocess.CompletedProcess
    elapsed: float

    @property
    def out(self) -> Path:
        return self.dir / "out"

    @property
    def output(self) -> str:
        return self.proc.stdout + self.proc.stderr

    def metrics(self) -> list[dict]:
        p = self.out / "metrics.jsonl"
        return [json.loads(x) for x in p.read_text().splitlines()] if p.is_file() else []

    def losses(self) -> dict[int, float]:
        return {m["step"]: m["loss"] for m in self.metrics() if "loss" in m}

    def last(self, key: str) -> float:
        return [m[key] for m in self.metrics() if key in m][-1]

    def check(self) -> "Run":
        assert self.proc.returncode == 0, self.output[-6000:]
        return self


def run_example(example: str, d: Path, *sets: str, args: tuple[str, ...] = (), timeout: float = 400) -> Run:
    """`tuner run` the example `example` (a file name under examples/) in folder `d`."""
    d.mkdir(parents=True, exist_ok=True)
    target = d / "settings.toml"
    shutil.copy(EXAMPLES / example, target)
    overrides = [x for s in ("output.dir=out", "hardware.platform=cpu", *sets) for x in ("--set", s)]
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tuner", "run", str(target), *overrides, *args], cwd=d,
                          capture_output=True, text=True, timeout=timeout, env=env())
    return Run(d, proc, time.monotonic() - t0)


def decreasing(losses: dict[int, float], k: int = 4) -> tuple[float, float]:
    """(mean of the first k losses, mean of the last k)."""
    vals = [losses[s] for s in sorted(losses)]
    return sum(vals[:k]) / k, sum(vals[-k:]) / k
