"""DeepSpeed's ops built beside the first tests (scripts/test.sh, tests/ops_wait.py): a test about
to start DeepSpeed ranks waits for the ops it needs while the background build runs, saying what
it waits for, and not at all when they are built or no build runs; `build_ops.py --warm` tells
test.sh whether a build is needed, without building. A `sleep` stands in for the build."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from tests import ops_wait
from tests.harness import REPO


def _build(monkeypatch, tmp_path, seconds: float, done: str = "") -> subprocess.Popen:
    proc = subprocess.Popen(["sleep", str(seconds)])
    progress = tmp_path / "progress"
    progress.write_text(done)
    monkeypatch.setenv("TUNER_OPS_BUILD_PID", str(proc.pid))
    monkeypatch.setenv("TUNER_OPS_PROGRESS", str(progress))
    monkeypatch.setenv("TUNER_OPS_LOG", str(tmp_path / "build.log"))
    return proc


def test_no_build_running_means_no_wait(monkeypatch):
    monkeypatch.delenv("TUNER_OPS_BUILD_PID", raising=False)
    assert ops_wait.wait_for_ops() == 0.0


def test_a_test_waits_for_the_running_build_and_says_so(monkeypatch, tmp_path, capsys):
    proc = _build(monkeypatch, tmp_path, 3)
    t0 = time.monotonic()
    ops_wait.wait_for_ops()
    assert time.monotonic() - t0 >= 2.5
    out = capsys.readouterr().out
    assert "waiting for DeepSpeed's ops (cpu_adam, deepspeed_shm_comm)" in out and str(tmp_path / "build.log") in out
    assert "DeepSpeed's ops: waited" in out
    proc.wait()


def test_the_ops_a_test_needs_built_means_no_wait_while_the_rest_build(monkeypatch, tmp_path, capsys):
    proc = _build(monkeypatch, tmp_path, 60, done="deepspeed_shm_comm\ncpu_adam\n")
    try:
        assert ops_wait.wait_for_ops() < 1.0
        assert capsys.readouterr().out == ""
        (tmp_path / "progress").write_text("deepspeed_shm_comm\ncpu_adam\npin_memory\n")
        t0 = time.monotonic()
        threading.Timer(2.0, lambda: (tmp_path / "progress").write_text("all\n")).start()
        ops_wait.wait_for_ops(nvme=True)  # async_io: still building
        assert time.monotonic() - t0 >= 1.5
        assert "waiting for DeepSpeed's ops (async_io)" in capsys.readouterr().out
    finally:
        proc.kill()
        proc.wait()


def test_build_ops_warm_says_whether_a_build_is_needed(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "TORCH_EXTENSIONS_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "build_ops.py"), "--warm"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and not list(tmp_path.iterdir()), r.stdout + r.stderr


def test_only_a_command_that_may_start_deepspeed_ranks_waits(monkeypatch, tmp_path, capsys):
    """`tuner check --launch-only` starts no rank and a DDP build's ranks load no DeepSpeed op:
    neither waits for the build (a worker waited ~200 s on each, idle, in the first tests);
    a ZeRO build, its settings file, or a command naming no build does."""
    from tuner.compiler.compile import compile_text

    from tests.harness import _before

    ddp = compile_text('[hardware]\nplatform = "cpu"\nnum_processes = 2\n', out_dir=tmp_path / "ddp").write()
    zero = compile_text('[hardware]\nplatform = "cpu"\nnum_processes = 2\n[deepspeed]\nenabled = true\nzero_stage = 2\n',
                        out_dir=tmp_path / "zero").write()
    (tmp_path / "zero.toml").write_text('[deepspeed]\nenabled = true\n')
    proc = _build(monkeypatch, tmp_path, 60)
    try:
        for args in (("check", "--launch-only", "zero", "t.py"), ("run", "ddp"), ("launch", "ddp", "t.py")):
            t0 = time.monotonic()
            _before(args, tmp_path)
            assert time.monotonic() - t0 < 1.0, args
        assert capsys.readouterr().out == ""
        for args in (("run", "zero"), ("check", "zero.toml"), ("run",)):
            threading.Timer(1.5, lambda: (tmp_path / "progress").write_text("all\n")).start()
            t0 = time.monotonic()
            _before(args, tmp_path)
            assert time.monotonic() - t0 >= 1.0, args
            assert "waiting for DeepSpeed's ops" in capsys.readouterr().out
            (tmp_path / "progress").write_text("")
    finally:
        proc.kill()
        proc.wait()
