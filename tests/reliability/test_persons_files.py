"""Issue 27, items 1-8: a person's files in and around tuner's output directories are never
touched, and two tuner processes never mix their writes. Real file systems, real flocks,
real runs and exports (one rank, a micro model); no mocks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tuner.compiler.diagnostics import EXIT_OK, EXIT_USAGE

from tests import harness
from tests.reliability.conftest import run_env, write_tiny_run
from tests.reliability.rel_helpers import EXAMPLES, refused_before_launch, tuner

ZERO1 = (EXAMPLES / "zero1.toml").read_text(encoding="utf-8")
DDP = (EXAMPLES / "ddp.toml").read_text(encoding="utf-8")


def tree(root: Path, skip: tuple[str, ...] = ()) -> dict[str, bytes | None]:
    """Every entry below `root` -> its bytes (None for a folder), links as their target."""
    out: dict[str, bytes | None] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel.split("/")[0] in skip:
            continue
        out[rel] = os.readlink(p).encode() if p.is_symlink() else None if p.is_dir() else p.read_bytes()
    return out


def copy_run(finished_run: Path, to: Path) -> Path:
    shutil.copytree(finished_run, to, ignore=shutil.ignore_patterns(".tuner-run.lock"), symlinks=True)
    return to


def run(*argv, cwd: Path, timeout: int = 400) -> subprocess.CompletedProcess:
    return harness.tuner(*map(str, argv), cwd=cwd, timeout=timeout)


# --- 1. output.dir = "." -------------------------------------------------------------------------

def test_1_run_into_a_project_folder_keeps_the_persons_final_and_checkpoint_files(tmp_path):
    settings = write_tiny_run(tmp_path)
    settings.write_text(settings.read_text().replace('dir = "out"', 'dir = "."'), encoding="utf-8")
    for rel, text in {"final/README.md": "my model card", "final.tmp/notes.txt": "mine",
                      "checkpoints/step-2/notes.txt": "another tool's checkpoint"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    before = tree(tmp_path, skip=("build",))
    p = refused_before_launch("run", settings, cwd=tmp_path)
    assert p.returncode == EXIT_USAGE, p.stderr[-3000:]
    assert "not written by tuner" in p.stderr and str(tmp_path / "final") in p.stderr, p.stderr
    assert str(tmp_path / "checkpoints" / "step-2") in p.stderr and "Traceback" not in p.stderr
    after = tree(tmp_path, skip=("build",))
    after.pop(".tuner-run.lock", None)
    assert after == before


# --- 2. the run lock and symbolic / hard links --------------------------------------------------------

@pytest.mark.parametrize("kind", ["symlink", "hardlink", "persons-file"])
def test_2_the_run_lock_never_writes_into_a_persons_file(tmp_path, kind):
    from tuner.runtime.artefacts import RunError
    from tuner.runtime.run_lock import LOCK_FILE, acquire_run_lock

    out = tmp_path / "out"
    out.mkdir()
    mine = tmp_path / "thesis.tex"
    mine.write_text("three years of work\n", encoding="utf-8")
    lock = out / LOCK_FILE
    if kind == "symlink":
        lock.symlink_to(mine)
    elif kind == "hardlink":
        os.link(mine, lock)
    else:
        mine = lock
        mine.write_text("my own notes, named badly\n", encoding="utf-8")
    before = mine.read_bytes()
    with pytest.raises(RunError) as info:
        with acquire_run_lock(out):
            pass
    assert str(lock) in info.value.message and "output.dir" in info.value.message
    assert mine.read_bytes() == before
    assert lock.is_symlink() == (kind == "symlink") and (lock.exists() or lock.is_symlink())


# --- 3. export: a person's folder named like the staging folder; a hand-edited record ---------------

@pytest.mark.slow
def test_3_export_keeps_a_persons_staging_named_folder_and_distrusts_an_edited_record(finished_run, tmp_path):
    from tuner.runtime.export import export_checkpoint

    ck = finished_run / "out" / "checkpoints"
    out = tmp_path / "export"
    export_checkpoint(ck / "step-4", out)
    (out / ".tuner-export-drafts").mkdir()
    (out / ".tuner-export-drafts" / "draft.md").write_text("mine", encoding="utf-8")
    (out / "notes.txt").write_text("mine too", encoding="utf-8")
    (out / "data").mkdir()
    (out / "data" / "eval.jsonl").write_text("{}\n", encoding="utf-8")
    record = json.loads((out / "tuner_export.json").read_text())
    record["entries"] += ["notes.txt", "data", ".tuner-export-drafts"]  # a hand edit
    (out / "tuner_export.json").write_text(json.dumps(record), encoding="utf-8")
    mine = {rel: data for rel, data in tree(out).items() if rel.split("/")[0] in
            (".tuner-export-drafts", "notes.txt", "data")}
    export_checkpoint(ck / "step-2", out)  # an earlier export: updated
    assert {rel: data for rel, data in tree(out).items() if rel in mine} == mine
    assert json.loads((out / "tuner_export.json").read_text())["checkpoint"].endswith("step-2")
    assert not (out / ".tuner-export.lock").exists()


# --- 4. compile: files named like its temporaries -------------------------------------------------

def test_4_compile_keeps_files_named_like_its_temporaries(tmp_path):
    out = tmp_path / "build"
    out.mkdir()
    names = [".accelerate.yaml.mine.tmp", ".manifest.json.x.tmp", ".deepspeed.json.1.tmp",
             f".accelerate.yaml.{os.getpid()}.bak.tmp", f".manifest.json.{os.getpid()}.bak.tmp"]
    for name in names:
        (out / name).write_text(f"{name} is mine\n", encoding="utf-8")
    settings = tmp_path / "s.toml"
    for text in (ZERO1, DDP, ZERO1):  # a first build, a second replacing it, a third
        settings.write_text(text, encoding="utf-8")
        code, _, err = tuner("compile", settings, "--out", out)
        assert code == EXIT_OK, err
        for name in names:
            assert (out / name).read_text() == f"{name} is mine\n"
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == sorted(names)


# --- 5. the run lock is per output directory ------------------------------------------------------

def test_5_a_one_machine_run_and_a_job_of_two_machines_never_share_an_output_dir(tmp_path):
    from tuner.runtime.artefacts import RunError
    from tuner.runtime.run_lock import acquire_run_lock

    out = tmp_path / "out"
    with acquire_run_lock(out, machine_rank=0):  # machine 0 of a two-machine job
        with acquire_run_lock(out, machine_rank=1):  # its machine 1: the same job, allowed
            with pytest.raises(RunError, match="another tuner run is using"):
                with acquire_run_lock(out):  # a one-machine build into the same directory
                    pass
        with pytest.raises(RunError, match="another tuner run is using"):
            with acquire_run_lock(out, machine_rank=0):  # a second launcher of machine 0
                pass
    with acquire_run_lock(out):
        for rank in (0, 1):
            with pytest.raises(RunError, match=f"another tuner run is using {out} \\(pid {os.getpid()}"):
                with acquire_run_lock(out, machine_rank=rank):
                    pass
    with acquire_run_lock(out, machine_rank=1):  # everything released
        pass


# --- 6. two exports into one new directory at once ----------------------------------------------------

@pytest.mark.slow
def test_6_a_second_export_into_a_directory_being_written_is_refused_truthfully(finished_run, tmp_path):
    from tuner.runtime.artefacts import RunError
    from tuner.runtime.export import export_checkpoint

    ck = finished_run / "out" / "checkpoints" / "step-4"
    out = tmp_path / "export"
    first = subprocess.Popen([sys.executable, "-m", "tuner", "checkpoint", "export", str(ck), "--out", str(out)],
                             cwd=tmp_path, env=run_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    # The first is writing once its staging folder is there (the lock, .tuner-export.lock, comes before).
    while not (out.is_dir() and any(p.name.startswith(".tuner-export-") for p in out.iterdir())):
        assert first.poll() is None or (out / "tuner_export.json").is_file(), first.communicate()
        if first.poll() is not None:
            break
        assert time.monotonic() < deadline
        time.sleep(0.01)
    try:
        export_checkpoint(ck, out)  # the second export, while the first writes
        second = "exported"
    except RunError as exc:
        second = exc.message
    _, err = first.communicate(timeout=300)
    # Whichever loses is refused with a true message; the winner's export is whole.
    assert first.returncode == EXIT_OK or first.returncode == EXIT_USAGE and "another tuner export is writing" in err, \
        err[-3000:]
    assert second == "exported" or "another tuner export is writing" in second, second
    assert first.returncode == EXIT_OK or second == "exported"
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(out)  # the directory is there and holds a whole model
    assert json.loads((out / "tuner_export.json").read_text())["entries"]


# --- 7. two compiles into one directory at once --------------------------------------------------

def test_7_concurrent_compiles_into_one_directory_take_turns(tmp_path):
    out = tmp_path / "build"
    (tmp_path / "zero.toml").write_text(ZERO1, encoding="utf-8")
    (tmp_path / "ddp.toml").write_text(DDP, encoding="utf-8")
    loop = textwrap.dedent(f"""
        import sys
        from tuner.compiler.compile import compile_file
        for i in range(12):
            name = ("zero.toml", "ddp.toml")[(i + int(sys.argv[1])) % 2]
            compile_file({str(tmp_path)!r} + "/" + name, out_dir={str(out)!r}).write()
    """)
    procs = [subprocess.Popen([sys.executable, "-c", loop, str(k)], stderr=subprocess.PIPE, text=True)
             for k in (0, 1)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert tuner("compile", tmp_path / "ddp.toml", "--out", out)[0] == EXIT_OK
    assert tuner("compile", tmp_path / "zero.toml", "--out", out)[0] == EXIT_OK  # no stray deepspeed.json blocks it
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(p.name for p in out.iterdir()) == sorted([*manifest["artefacts"], "manifest.json"])


# --- 8. edited checkpoints --------------------------------------------------------------------

def test_8_a_checkpoint_folder_that_disagrees_with_its_record_is_not_resumed(finished_run, tmp_path):
    run_dir = copy_run(finished_run, tmp_path / "run")
    ck = run_dir / "out" / "checkpoints"
    shutil.copytree(ck / "step-4", ck / "step-6")  # step 4's files under step 6's name
    (ck / "latest").write_text("step-6\n")
    p = refused_before_launch("run", run_dir / "settings.toml", "--resume", "latest", "--max-steps", "8", cwd=run_dir)
    assert p.returncode == EXIT_USAGE, p.stderr[-3000:]
    assert "named step-6 but its tuner_checkpoint.json records step 4" in p.stderr, p.stderr
    assert f"the last intact one is {ck / 'step-4'}" in p.stderr and "resumed" not in p.stdout


def test_8_a_checkpoint_past_the_last_step_is_not_resumed(finished_run, tmp_path):
    run_dir = copy_run(finished_run, tmp_path / "run")
    ck = run_dir / "out" / "checkpoints"
    record = json.loads((ck / "step-4" / "tuner_checkpoint.json").read_text())
    record["step"] = 1000000
    (ck / "step-4" / "tuner_checkpoint.json").write_text(json.dumps(record))
    (ck / "step-4").rename(ck / "step-1000000")
    (ck / "latest").write_text("step-1000000\n")
    before = tree(run_dir / "out")
    p = refused_before_launch("run", run_dir / "settings.toml", "--resume", "latest", cwd=run_dir)
    assert p.returncode == EXIT_USAGE, p.stderr[-3000:]
    assert "is at step 1000000, past this run's last step 4" in p.stderr, p.stderr
    assert f"the last intact one is {ck / 'step-2'}" in p.stderr
    after = tree(run_dir / "out")
    after.pop(".tuner-run.lock", None)
    assert after == before
