"""How fast is `tuner compile`, relative to `python -c "import accelerate"`?

Both are measured in this one run, interleaved, as whole processes (what a CI step pays),
so the ratio holds on a shared, noisy machine. Target: ratio <= 0.15.

    python bench/compile_speed.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = 0.15


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    largest = max((REPO / "examples").glob("*.toml"), key=lambda p: p.stat().st_size)
    with tempfile.TemporaryDirectory() as out:
        compile_cmd = [sys.executable, "-m", "tuner", "compile", str(largest), "--out", out, "-q"]
        accel_cmd = [sys.executable, "-c", "import accelerate"]
        wall(compile_cmd), wall(accel_cmd)  # warm the file cache for both
        compile_times, accel_times = [], []
        for _ in range(args.runs):
            compile_times.append(wall(compile_cmd))
            accel_times.append(wall(accel_cmd))
    c, a = statistics.median(compile_times), statistics.median(accel_times)
    ratio = c / a
    print(f"example: {largest.relative_to(REPO)}  runs: {args.runs} (medians)")
    print(f"tuner compile:             {c * 1000:7.1f} ms")
    print(f'python -c "import accelerate": {a * 1000:7.1f} ms')
    print(f"ratio: {ratio:.3f}  (target <= {TARGET}: {'met' if ratio <= TARGET else 'NOT met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
