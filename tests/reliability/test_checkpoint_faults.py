"""Issue 27, item 11 (checkpoints and disks): a full disk during a save, a garbled state file
in `latest`, `latest` replaced by a folder: exit 2 and one message, never a rank traceback.
Real runs (one rank, a micro model), a real full disk (tmpfs)."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.reliability.conftest import write_tiny_run
from tests.reliability.rel_helpers import refused_before_launch, tiny_tmpfs
from tests.reliability.test_persons_files import copy_run, run
from tuner.compiler.diagnostics import EXIT_USAGE

pytestmark = pytest.mark.slow


def test_a_full_disk_during_a_save_names_the_path_and_exits_2(tmp_path):
    settings = write_tiny_run(tmp_path / "proj")
    with tiny_tmpfs(tmp_path / "mnt", 320) as mnt:  # room for the model state, not the optimizer's
        settings.write_text(settings.read_text().replace('dir = "out"', f'dir = "{mnt}/out"'), encoding="utf-8")
        p = run("run", settings, cwd=settings.parent)
        assert p.returncode == EXIT_USAGE, p.stderr[-3000:]
        assert f"No space left on device writing {mnt}/out/checkpoints/.tmp-step-2" in p.stderr, p.stderr[-3000:]
        assert "Traceback" not in p.stderr, p.stderr[-3000:]
        assert not (mnt / "out" / "checkpoints" / "step-2").exists()  # no half checkpoint published


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.bin"])
def test_a_garbled_state_file_in_latest_names_the_last_intact_step(finished_run, tmp_path, name):
    run_dir = copy_run(finished_run, tmp_path / "run")
    ck = run_dir / "out" / "checkpoints"
    target = ck / "step-4" / name
    target.write_bytes(os.urandom(target.stat().st_size))  # same size: only reading it tells
    p = run("run", run_dir / "settings.toml", "--resume", "latest", "--max-steps", "6", cwd=run_dir)
    assert p.returncode == EXIT_USAGE, p.stderr[-3000:]
    assert f"checkpoint {ck / 'step-4'} is damaged: its state cannot be read" in p.stderr, p.stderr[-3000:]
    assert f"the last intact one is {ck / 'step-2'}" in p.stderr and f"--resume {ck / 'step-2'}" in p.stderr
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert not (ck / "step-6").exists()


def test_latest_replaced_by_a_folder_is_refused_with_a_message(finished_run, tmp_path):
    run_dir = copy_run(finished_run, tmp_path / "run")
    ck = run_dir / "out" / "checkpoints"
    (ck / "latest").unlink()
    (ck / "latest").mkdir()
    (ck / "latest" / "mine.txt").write_text("mine", encoding="utf-8")
    p = refused_before_launch("run", run_dir / "settings.toml", "--resume", "latest", "--max-steps", "6", cwd=run_dir)
    assert p.returncode == EXIT_USAGE, p.stderr[-3000:]
    assert f"{ck / 'latest'} is not tuner's pointer file (it is a directory)" in p.stderr, p.stderr[-3000:]
    assert f"the last intact one is {ck / 'step-4'}" in p.stderr and "Traceback" not in p.stderr
    assert (ck / "latest" / "mine.txt").read_text() == "mine" and not (ck / "step-6").exists()
    shutil.rmtree(ck / "latest")
