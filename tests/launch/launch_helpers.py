"""Helpers for tests/launch: compile a settings dict, run `tuner launch`/`tuner run` as a
person would (a subprocess), read what each rank of the plain script reported."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests import harness
from tests.runtime.runtime_helpers import to_toml

HERE = Path(__file__).resolve().parent
PLAIN = HERE / "plain_accelerate.py"

CPU2 = {"hardware": {"platform": "cpu", "num_processes": 2}}
#: Strategy -> settings sections for a 2-rank CPU build of the plain script.
BUILDS = {
    "ddp": {},
    "fsdp2": {"fsdp": {"enabled": True, "version": 2, "auto_wrap_policy": "none"}},
    "zero2": {"deepspeed": {"enabled": True, "zero_stage": 2}, "training": {"micro_batch_size": 8}},
    "zero3": {"deepspeed": {"enabled": True, "zero_stage": 3}, "training": {"micro_batch_size": 8}},
    "zero2_offload": {"deepspeed": {"enabled": True, "zero_stage": 2, "offload_optimizer": "cpu"},
                      "training": {"micro_batch_size": 8}},
}


def write_settings(d: Path, *sections: dict) -> Path:
    merged: dict = {}
    for sec in sections:
        for name, values in sec.items():
            merged.setdefault(name, {}).update(values)
    d.mkdir(parents=True, exist_ok=True)
    (d / "settings.toml").write_text(to_toml(merged))
    return d / "settings.toml"


env = harness.env


def compile_build(d: Path, *sections: dict) -> Path:
    settings = write_settings(d, *sections)
    c = harness.tuner("compile", str(settings), "-q", timeout=120)
    assert c.returncode == 0, c.stderr
    return d / "build"


def tuner(*args: str, cwd: Path, timeout: float = 300, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    return harness.tuner(*args, cwd=cwd, timeout=timeout, env=extra_env)


def rank_reports(out: Path, world: int) -> list[dict]:
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(world)]


def falling(losses: list[float]) -> bool:
    k = max(1, len(losses) // 4)
    return sum(losses[-k:]) / k < 0.5 * sum(losses[:k]) / k
