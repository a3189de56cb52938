"""What a run reports: the rank-0 progress bar, metrics.jsonl and (optionally) TensorBoard.

Only rank 0 creates a `Reporter` that writes; other ranks get a silent one, so no shared
file is ever written by two processes.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


class Reporter:
    def __init__(self, output_dir: Path, total_steps: int, start_step: int, unit: str, *, main: bool,
                 tensorboard: bool) -> None:
        self.main = main
        self.unit = unit
        self._bar = None
        self._tb = None
        self._fh = None
        self._t0 = time.perf_counter()
        if not main:
            return
        output_dir.mkdir(parents=True, exist_ok=True)
        self._fh = open(output_dir / "metrics.jsonl", "a", encoding="utf-8")
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(output_dir / "tensorboard"))
            except ImportError:
                self.message("training.tensorboard is on but the tensorboard package is not installed "
                             "(pip install tensorboard); continuing with metrics.jsonl only")
        from tqdm.auto import tqdm

        self._bar = tqdm(total=total_steps, initial=start_step, desc="train", unit="step", dynamic_ncols=True,
                         file=sys.stderr)

    def message(self, text: str) -> None:
        if not self.main:
            return
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def step(self, step: int, metrics: dict[str, Any] | None) -> None:
        """Advance the bar by one optimizer step; `metrics` (when given) is logged."""
        if not self.main:
            return
        if metrics:
            self.log(step, metrics)
            post = {"loss": f"{metrics['loss']:.4f}"}
            if "throughput" in metrics:
                post[f"{self.unit}/s"] = f"{metrics['throughput']:.0f}"
            self._bar.set_postfix(post, refresh=False)
        self._bar.update(1)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.main:
            return
        row = {"step": step, "time": round(time.perf_counter() - self._t0, 4), **metrics}
        self._fh.write(json.dumps(row, sort_keys=True) + "\n")
        self._fh.flush()
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)):
                    self._tb.add_scalar(k, v, step)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._fh is not None:
            self._fh.close()
        if self._tb is not None:
            self._tb.close()
