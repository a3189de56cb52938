"""What a `tuner run` subprocess left behind, as the runtime and family tests read it."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Run:
    dir: Path
    proc: subprocess.CompletedProcess
    elapsed: float
    traces: dict[int, dict] = field(default_factory=dict)
    """Per-rank trace files (tests/runtime/trace_callbacks.py), when the test asked for them."""

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
        """Assert the run exited 0 (showing the end of its output otherwise); returns self."""
        assert self.proc.returncode == 0, self.output[-6000:]
        return self
