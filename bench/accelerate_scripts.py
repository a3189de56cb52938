"""accelerate's own test scripts (accelerate/test_utils/scripts/) under `tuner launch`, on 2 CPU
gloo ranks, for each build: DDP, FSDP2, ZeRO-2, ZeRO-3.

    python bench/accelerate_scripts.py [--scripts test_ops,test_script ...] [--builds ddp,zero2 ...] [--json]

Prints one line per (script, build): passed / FAILED with the seconds it took and, for a
failure, the last lines of its output; "upstream limit" for a pair in UPSTREAM_LIMITS that
fails with the stated message (it fails the same way on GPUs). Exit 0 when every other pair
passed. The suite runs a
representative subset (tests/launch/test_accelerate_scripts.py); this is the full matrix.

Which scripts: those that run on CPU (accelerate's own CI runs them with `--cpu` / on
multi-CPU), i.e. `CPU_SCRIPTS`. Left out, with the reason: test_notebook.py (pytest tests of
`notebook_launcher`, which starts its own processes: not a script for a launcher),
test_merge_weights.py (builds its own FSDP v1 plugin; torch's FSDP v1 computes on CUDA-like
devices only), test_ddp_comm_hook.py (its reference DDP passes `device_ids`, which torch
refuses for CPU modules), test_distributed_data_loop.py (asserts two GPUs in its message; its
uneven-inputs case needs `Accelerator.join_uneven_inputs`, which accelerate enables only for
GPU-family types (`Accelerator.multi_device`): on MULTI_CPU, accelerate's own CPU type, the
rank with the extra batch waits in DDP's all-reduce for ever, by accelerate's code, with or
without tuner), and external_deps/ (models and data from the Hub, GPUs).
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

CPU_SCRIPTS = ["test_cli", "test_ops", "test_script", "test_sync"]
BUILDS = {
    "ddp": {},
    "fsdp2": {"fsdp": {"enabled": True, "version": 2, "auto_wrap_policy": "none"}},
    "zero2": {"deepspeed": {"enabled": True, "zero_stage": 2}, "training": {"micro_batch_size": 8}},
    "zero3": {"deepspeed": {"enabled": True, "zero_stage": 3}, "training": {"micro_batch_size": 8}},
}


#: (script, build) -> the message the script fails with on that build on GPUs just the same,
#: and why: not a CPU difference, so not tuner's to fix. Asserted to be that failure.
UPSTREAM_LIMITS = {
    ("test_script", "fsdp2"): ("fully_shard doesn't support scalar parameters",
                               "its RegressionModel has scalar parameters `a` and `b`, which torch's FSDP2 "
                               "`fully_shard` refuses on any device"),
    ("test_sync", "fsdp2"): ("fully_shard doesn't support scalar parameters",
                             "the same RegressionModel: torch's FSDP2 refuses scalar parameters on any device"),
    ("test_sync", "zero2"): ("cannot be 0 to view Float as Byte",
                             "the same RegressionModel: DeepSpeed's engine broadcasts every parameter as "
                             "`p.data.view(torch.uint8)` (DeepSpeedEngine._broadcast_model), which a 0-d "
                             "parameter cannot be, on any device"),
    ("test_sync", "zero3"): ("cannot be 0 to view Float as Byte", "as on ZeRO-2: DeepSpeedEngine._broadcast_model"),
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
    build = build_dir.parent.name
    limit = UPSTREAM_LIMITS.get((script, build))
    expected = bool(limit) and rc != 0 and limit[0] in str(out)
    return {"script": script, "build": build, "rc": rc, "seconds": round(time.monotonic() - t0),
            "ok": rc == 0 or expected, "upstream_limit": limit[1] if expected else None,
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
                status = ("passed" if r["rc"] == 0 else "upstream limit" if r["ok"] else f"FAILED (exit {r['rc']})")
                print(f"{script:28} {build:6} {status:18} {r['seconds']:5d} s"
                      + (f"  ({r['upstream_limit']})" if r["upstream_limit"] else ""), flush=True)
                if not r["ok"] and not a.json:
                    print("    " + r["tail"].replace("\n", "\n    "), flush=True)
    if a.json:
        print(json.dumps(results, indent=1))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
