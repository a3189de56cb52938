"""accelerate's own test scripts (accelerate/test_utils/scripts/) under `tuner launch`, on 2 CPU
gloo ranks, for each build: DDP, FSDP2, ZeRO-2, ZeRO-3.

    python bench/accelerate_scripts.py [--scripts test_ops,test_script ...] [--builds ddp,zero2 ...] [--json]

Prints one line per (script, build): passed / FAILED with the seconds it took and, for a
failure, the last lines of its output. Exit 0 when every pair passed. The suite runs a
representative subset (tests/launch/test_accelerate_scripts.py); this is the full matrix.

Which scripts: those that run on CPU (accelerate's own CI runs them with `--cpu` / on
multi-CPU), i.e. `CPU_SCRIPTS`. Left out, with the reason: test_notebook.py (pytest tests of
`notebook_launcher`, which starts its own processes: not a script for a launcher),
test_merge_weights.py (builds its own FSDP v1 plugin; torch's FSDP v1 computes on CUDA-like
devices only), test_ddp_comm_hook.py (its reference DDP passes `device_ids`, which torch
refuses for CPU modules), and external_deps/ (models and data from the Hub, GPUs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CPU_SCRIPTS = ["test_cli", "test_ops", "test_script", "test_sync", "test_distributed_data_loop"]
BUILDS = {
    "ddp": {},
    "fsdp2": {"fsdp": {"enabled": True, "version": 2, "auto_wrap_policy": "none"}},
    "zero2": {"deepspeed": {"enabled": True, "zero_stage": 2}, "training": {"micro_batch_size": 8}},
    "zero3": {"deepspeed": {"enabled": True, "zero_stage": 3}, "training": {"micro_batch_size": 8}},
}


def scripts_dir() -> Path:
    import accelerate.test_utils

    return Path(accelerate.test_utils.__file__).resolve().parent / "scripts"


def settings_toml(build: str) -> str:
    sections = {"hardware": {"platform": "cpu", "num_processes": 2}, **BUILDS[build]}
    lines = []
    for name, values in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def compile_build(root: Path, build: str) -> Path:
    d = root / build
    d.mkdir(parents=True, exist_ok=True)
    (d / "settings.toml").write_text(settings_toml(build))
    c = subprocess.run([sys.executable, "-m", "tuner", "compile", str(d / "settings.toml"), "-q"],
                       capture_output=True, text=True, timeout=120)
    if c.returncode != 0:
        raise SystemExit(f"compile {build}: {c.stderr}")
    return d / "build"


def run_one(build_dir: Path, script: str, cwd: Path, timeout: float = 900) -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "tuner", "launch", str(build_dir),
                            str(scripts_dir() / f"{script}.py")], cwd=cwd, capture_output=True, text=True,
                           timeout=timeout, env=env)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out = 124, f"timed out after {timeout} s: {exc.stdout or ''}{exc.stderr or ''}"
    return {"script": script, "build": build_dir.parent.name, "rc": rc, "seconds": round(time.monotonic() - t0),
            "tail": "\n".join(str(out).splitlines()[-25:])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scripts", default=",".join(CPU_SCRIPTS))
    ap.add_argument("--builds", default=",".join(BUILDS))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for build in a.builds.split(","):
            build_dir = compile_build(root, build)
            for script in a.scripts.split(","):
                r = run_one(build_dir, script, root)
                results.append(r)
                status = "passed" if r["rc"] == 0 else f"FAILED (exit {r['rc']})"
                print(f"{script:28} {build:6} {status:18} {r['seconds']:5d} s", flush=True)
                if r["rc"] != 0 and not a.json:
                    print("    " + r["tail"].replace("\n", "\n    "), flush=True)
    if a.json:
        print(json.dumps(results, indent=1))
    return 0 if all(r["rc"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
