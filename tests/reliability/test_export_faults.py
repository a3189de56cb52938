"""Issue 27, item 10 (the rest): a full disk during `tuner checkpoint export`, and a checkpoint
symlink loop (`latest -> latest`, `step-2 -> step-2`) for `tuner run --resume latest` and for
export: exit 2 and one message naming the path, never an internal error or a rank started.
The checkpoints come from the session's one tiny real run (conftest's `finished_run`), copied."""

from __future__ import annotations

import os

import pytest

from tests.reliability.rel_helpers import refused_before_launch, tiny_tmpfs, tuner
from tests.reliability.test_persons_files import copy_run
from tuner.compiler.diagnostics import EXIT_USAGE

pytestmark = pytest.mark.slow

LOOP = "is a symbolic link that points back at itself (a loop)"


@pytest.fixture(scope="module")
def looped(finished_run, tmp_path_factory):
    """One copy of the finished run whose checkpoints hold both loops: `latest -> latest` in
    `checkpoints/`, and `step-2 -> step-2` in a second checkpoints folder `loop2/` whose
    `latest` names step-2 (step-4 intact beside it)."""
    run_dir = copy_run(finished_run, tmp_path_factory.mktemp("looped") / "run")
    ck = run_dir / "out" / "checkpoints"
    (ck / "latest").unlink()
    os.symlink("latest", ck / "latest")
    loop2 = run_dir / "loop2"
    loop2.mkdir()
    os.symlink(ck / "step-4", loop2 / "step-4")
    os.symlink("step-2", loop2 / "step-2")
    (loop2 / "latest").write_text("step-2\n", encoding="utf-8")
    return run_dir


def test_resume_latest_pointing_at_itself_is_refused_before_any_rank(looped):
    ck = looped / "out" / "checkpoints"
    p = refused_before_launch("run", looped / "settings.toml", "--resume", "latest", "--max-steps", "6", cwd=looped)
    assert p.returncode == EXIT_USAGE, p.stderr[-3000:]
    assert f"checkpoint pointer {ck / 'latest'} {LOOP}" in p.stderr, p.stderr[-3000:]
    assert f"the last intact one is {ck / 'step-4'}" in p.stderr and f"--resume {ck / 'step-4'}" in p.stderr
    assert "Traceback" not in p.stderr + p.stdout and "step 5" not in p.stdout, p.stdout[-2000:]
    assert not (ck / "step-6").exists() and os.readlink(ck / "latest") == "latest"


@pytest.mark.parametrize("where", ["out/checkpoints", "out/checkpoints/latest", "loop2", "loop2/step-2"])
def test_export_of_a_checkpoint_symlink_loop_names_the_link(looped, tmp_path, where):
    code, out, err = tuner("checkpoint", "export", looped / where, "--out", tmp_path / "exp")
    link = looped / ("loop2/step-2" if where.startswith("loop2") else "out/checkpoints/latest")
    assert code == EXIT_USAGE, err[-3000:]
    assert f"{link} {LOOP}" in err, err[-3000:]
    intact = link.parent / "step-4"
    assert f"the last intact one is {intact}: export it with `tuner checkpoint export {intact}" in err, err
    assert "Traceback" not in out + err and not (tmp_path / "exp").exists()
    assert os.path.islink(link)  # the person's link is left as it was


def test_a_full_disk_during_export_names_the_out_folder_and_leaves_nothing(finished_run, tmp_path):
    step = finished_run / "out" / "checkpoints" / "step-4"
    with tiny_tmpfs(tmp_path / "mnt", 200) as mnt:  # room for the config, not the model
        (mnt / "mine.txt").write_bytes(b"the person's notes\n")
        (mnt / "exp").mkdir()  # the person's empty folder: used, and kept after the failure
        code, out, err = tuner("checkpoint", "export", step, "--out", mnt / "exp")
        assert code == EXIT_USAGE, err[-3000:]
        assert f"No space left on device: {mnt / 'exp'}" in err, err[-3000:]
        assert "Traceback" not in out + err and "internal error" not in err, err[-3000:]
        assert sorted(p.name for p in mnt.iterdir()) == ["exp", "mine.txt"]
        assert list((mnt / "exp").iterdir()) == []  # no staging folder, no half model, no lock
        assert (mnt / "mine.txt").read_bytes() == b"the person's notes\n"
