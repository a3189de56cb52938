"""Issue 26: `tuner run` into an output directory that already holds a run resumes when
asked (``--resume latest``, ``checkpoint.resume = "auto"``) and is refused otherwise; the
files tuner writes for people to share get the ordinary mode under the user's umask."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.conftest import run_env, write_tiny_run
from tests.reliability.rel_helpers import refused_before_launch
from tests.reliability.test_persons_files import copy_run, run, tree
from tuner.compiler.diagnostics import EXIT_OK, EXIT_USAGE

pytestmark = pytest.mark.slow


def _steps(metrics: Path) -> list[int]:
    return [json.loads(line)["step"] for line in metrics.read_text().splitlines() if '"loss"' in line]


def test_a_rerun_into_an_output_dir_with_a_run_is_refused_and_nothing_is_replaced(finished_run, tmp_path):
    run_dir = copy_run(finished_run, tmp_path / "run")
    before = tree(run_dir / "out")
    p = refused_before_launch("run", run_dir / "settings.toml", cwd=run_dir)
    assert p.returncode == EXIT_USAGE, p.stderr[-3000:]
    assert f"{run_dir / 'out'} already holds a run (metrics.jsonl, checkpoints/, final/)" in p.stderr, p.stderr
    assert "--resume latest" in p.stderr and 'checkpoint.resume = "auto"' in p.stderr, p.stderr
    after = tree(run_dir / "out")
    after.pop(".tuner-run.lock", None)
    assert after == before


def test_resume_latest_continues_the_run_and_keeps_a_persons_file_in_final(finished_run, tmp_path):
    run_dir = copy_run(finished_run, tmp_path / "run")
    out = run_dir / "out"
    (out / "final" / "README.md").write_text("my model card\n", encoding="utf-8")
    metrics_before = (out / "metrics.jsonl").read_bytes()
    p = run("run", run_dir / "settings.toml", "--resume", "latest", "--max-steps", "6", cwd=run_dir)
    assert p.returncode == EXIT_OK, p.stderr[-3000:]
    assert f"resumed from {out / 'checkpoints' / 'step-4'} at step 4" in p.stdout, p.stdout[-2000:]
    assert (out / "final" / "README.md").read_text() == "my model card\n"
    assert (out / "metrics.jsonl").read_bytes().startswith(metrics_before)  # continued, nothing rewritten
    assert _steps(out / "metrics.jsonl") == [1, 2, 3, 4, 5, 6]
    assert (out / "checkpoints" / "step-6" / "tuner_checkpoint.json").is_file()
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(out / "final")


def test_checkpoint_resume_auto_resumes_a_run(finished_run, tmp_path):
    run_dir = copy_run(finished_run, tmp_path / "run")
    settings = run_dir / "settings.toml"
    text = settings.read_text().replace("[checkpoint]\n", '[checkpoint]\nresume = "auto"\n')
    settings.write_text(text, encoding="utf-8")
    p = run("run", settings, cwd=run_dir)  # the run has reached its last step: nothing to train, no error
    assert p.returncode == EXIT_OK, p.stderr[-3000:]
    assert "resumed from" in p.stdout and "at step 4" in p.stdout, p.stdout[-2000:]
    assert _steps(run_dir / "out" / "metrics.jsonl") == [1, 2, 3, 4]


def _modes(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): stat.S_IMODE(p.lstat().st_mode) for p in root.rglob("*")}


def _expected(modes: dict[str, int], root: Path, umask: int) -> list[str]:
    wrong = []
    for rel, mode in modes.items():
        is_dir = (root / rel).is_dir()
        want = (0o777 if is_dir or rel.endswith("launch.sh") else 0o666) & ~umask
        if mode != want:
            wrong.append(f"{rel}: {oct(mode)} (expected {oct(want)})")
    return wrong


def test_shared_files_get_the_umask_mode_under_022(finished_run, tmp_path):
    """The session's finished run ran under this process's umask (022 here)."""
    umask = os.umask(0o022)
    os.umask(umask)
    if umask != 0o022:
        pytest.skip("the test process's umask is not 022")
    out = finished_run / "out"
    assert _expected(_modes(out), out, 0o022) == []
    assert _expected(_modes(finished_run / "build"), finished_run / "build", 0o022) == []
    from tuner.runtime.export import export_checkpoint

    export_checkpoint(out / "checkpoints" / "step-4", tmp_path / "export")
    assert _expected(_modes(tmp_path / "export"), tmp_path / "export", 0o022) == []
    assert stat.S_IMODE((tmp_path / "export").stat().st_mode) == 0o755


def test_shared_files_get_the_umask_mode_under_077(tmp_path):
    settings = write_tiny_run(tmp_path, steps=2)
    p = subprocess.run([sys.executable, "-m", "tuner", "run", str(settings)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=400, env=run_env(), umask=0o077)
    assert p.returncode == EXIT_OK, p.stderr[-3000:]
    p = subprocess.run([sys.executable, "-m", "tuner", "checkpoint", "export", str(tmp_path / "out" / "checkpoints"),
                        "--out", str(tmp_path / "export")], cwd=tmp_path, capture_output=True, text=True,
                       timeout=400, env=run_env(), umask=0o077)
    assert p.returncode == EXIT_OK, p.stderr[-3000:]
    for d in ("out", "build", "export"):
        assert _expected(_modes(tmp_path / d), tmp_path / d, 0o077) == [], d
