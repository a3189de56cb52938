"""What a run reports: rank 0's progress, metrics.jsonl and the trackers (`tracking`).

On a terminal, rank 0 draws a tqdm bar with the loss, units per second (tokens/s for
language models), learning rate and ETA. Elsewhere (a pipe, a log file, CI) there is no
bar: one plain line per log step instead (``step 5/20 loss 2.3456 lr 1.00e-04 tokens/s 812
eta 0:00:31``). Only rank 0 creates a `Reporter` that writes; other ranks get a silent one,
so no shared file is ever written by two processes.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO


def _eta(seconds: float) -> str:
    return str(datetime.timedelta(seconds=max(0, round(seconds))))


class Reporter:
    def __init__(self, output_dir: Path, total_steps: int, start_step: int, unit: str, *, main: bool,
                 track: Callable[[dict[str, Any], int], None] | None = None, stream: TextIO | None = None,
                 tty: bool | None = None) -> None:
        """`track(values, step)`: where metrics go besides metrics.jsonl (``accelerator.log``).
        `stream` (default stderr) and `tty` (default: whether it is a terminal) decide bar or lines."""
        self.main = main
        self.unit = unit
        self.total = total_steps
        self.start_step = start_step
        self.track = track
        self.stream = stream or sys.stderr
        self._bar = None
        self._fh = None
        self._t0 = time.perf_counter()
        if not main:
            return
        output_dir.mkdir(parents=True, exist_ok=True)
        self._fh = open(output_dir / "metrics.jsonl", "a", encoding="utf-8")
        if tty if tty is not None else self.stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total_steps, initial=start_step, desc="train", unit="step", dynamic_ncols=True,
                             file=self.stream)

    def message(self, text: str) -> None:
        if not self.main:
            return
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def _fields(self, metrics: dict[str, Any]) -> dict[str, str]:
        out = {"loss": f"{metrics['loss']:.4f}"}
        if "lr" in metrics:
            out["lr"] = f"{metrics['lr']:.2e}"
        if "throughput" in metrics:
            out[f"{self.unit}/s"] = f"{metrics['throughput']:.0f}"
        return out

    def step(self, step: int, metrics: dict[str, Any] | None) -> None:
        """Advance by one optimizer step; `metrics` (when given) is logged and shown."""
        if not self.main:
            return
        if metrics:
            self.log(step, metrics)
        if self._bar is not None:
            if metrics:
                self._bar.set_postfix(self._fields(metrics), refresh=False)
            self._bar.update(1)
        elif metrics:
            done = step - self.start_step
            eta = (time.perf_counter() - self._t0) / max(done, 1) * (self.total - step)
            fields = " ".join(f"{k} {v}" for k, v in self._fields(metrics).items())
            print(f"step {step}/{self.total} {fields} eta {_eta(eta)}", file=self.stream, flush=True)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.main or self._fh is None:
            return
        row = {"step": step, "time": round(time.perf_counter() - self._t0, 4), **metrics}
        self._fh.write(json.dumps(row, sort_keys=True) + "\n")
        self._fh.flush()
        if self.track is not None:
            self.track({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._fh is not None:
            self._fh.close()
