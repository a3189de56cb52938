"""`tuner check` on every example build: wall time and verdict (docs/benchmarks.md).

    python bench/check_examples.py [NAME...]

Each example is compiled into a temporary directory; CPU examples get the whole check (launch
part and the rehearsal of tuner's own trainer on 2 gloo ranks), CUDA targets the launch part
only (`--launch-only --skip gpus`: no GPU here). Prints one row per example: wall seconds of
the `tuner check` process, its exit code, the launch part's seconds, the faults it named, and
the 1-minute load average when it ended.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def run(name: str) -> str:
    with tempfile.TemporaryDirectory(prefix=f"check-{name}-") as d:
        build = Path(d) / "b"
        c = subprocess.run([sys.executable, "-m", "tuner", "compile", str(EXAMPLES / f"{name}.toml"), "--out",
                            str(build), "-q"], capture_output=True, text=True)
        if c.returncode:
            return f"| {name} | compile failed: {c.stderr.strip()[:200]} |"
        cuda = json.loads((build / "manifest.json").read_text())["plan"].get("platform") == "cuda"
        args = ["--launch-only", "--skip", "gpus"] if cuda else []
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "tuner", "check", "--json", *args, str(build)], capture_output=True,
                           text=True, cwd=d)
        wall = time.monotonic() - t0
        load = os.getloadavg()[0]
        try:
            report = json.loads(p.stdout)
        except ValueError:
            return f"| {name} | {wall:.1f} s | {p.returncode} | no report: {p.stderr.strip()[-300:]} |"
        faults = "; ".join(f"{f['check']}: {f['saw'][:120]}" for f in report["faults"]) or "none"
        part = "launch part only (CUDA target)" if cuda else "with rehearsal"
        return (f"| {name} | {wall:.1f} s ({part}) | {p.returncode} | {report['timings_s'].get('launch checks', 0):.2f} s "
                f"| {faults} | {load:.1f} |")


def main() -> None:
    names = sys.argv[1:] or sorted(p.stem for p in EXAMPLES.glob("*.toml"))
    print("| example | wall | exit | launch part | faults | load |\n|---|---|---|---|---|---|")
    for name in names:
        print(run(name), flush=True)


if __name__ == "__main__":
    main()
