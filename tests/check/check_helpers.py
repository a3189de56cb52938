"""Helpers for tests/check: compile builds, run `tuner check` as a person would (a
subprocess), read its JSON report."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from tests import harness
from tests.launch.launch_helpers import env, write_settings  # noqa: F401 - re-exported

HERE = Path(__file__).resolve().parent
FAULTS = HERE / "faults"
CPU2 = {"hardware": {"platform": "cpu", "num_processes": 2}}


def compile_build(d: Path, *sections: dict) -> Path:
    """The build of these settings sections in `d`/build: the compile `tuner compile` runs, in
    this process (the build is byte for byte the command's; what these tests run as a person
    would is `tuner check`, not the compile, and each compile in a subprocess cost a CLI start)."""
    from tuner.compiler.compile import compile_file
    from tuner.compiler.diagnostics import render_text

    result = compile_file(write_settings(d, *sections))
    assert result.ok, render_text(result.diagnostics.items)
    return result.write()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_machines(port: int, **more) -> dict:
    return {"hardware": {"platform": "cpu", "num_processes": 2, "num_machines": 2, "main_process_ip": "127.0.0.1",
                         "main_process_port": port, **more}}


def check_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "tuner", "check", "--json", *args]


def check(*args: str, cwd: Path, timeout: float = 600, extra_env: dict | None = None) -> tuple[int, dict, str]:
    """(exit code, JSON report or {}, stderr)."""
    p = harness.tuner("check", "--json", *args, cwd=cwd, timeout=timeout, env=extra_env)
    try:
        report = json.loads(p.stdout) if p.stdout.strip() else {}
    except ValueError:
        raise AssertionError(f"stdout is not the JSON report:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}") from None
    return p.returncode, report, p.stderr


def start(*args: str, cwd: Path, extra_env: dict | None = None) -> subprocess.Popen:
    return harness.start("check", "--json", *args, cwd=cwd, env=extra_env)


def finish(p: subprocess.Popen, timeout: float = 120) -> tuple[int, dict, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, (json.loads(out) if out.strip() else {}), err


def faults(report: dict, run: int | None = None) -> dict[str, list[dict]]:
    """check name -> its fault findings (of one Accelerator group `run`, if given)."""
    out: dict[str, list[dict]] = {}
    for f in report.get("faults", []):
        if run is None or f.get("run") == run:
            out.setdefault(f["check"], []).append(f)
    return out
