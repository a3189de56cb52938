"""Honest endings: internal errors, closed pipes, full and read-only disks, damaged
checkpoints, and one `tuner run` per output directory."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tuner.compiler import diagnostics
from tuner.compiler.diagnostics import EXIT_BROKEN_PIPE, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE

from tests import harness
from tests.reliability.conftest import run_env, write_tiny_run
from tests.reliability.rel_helpers import DOCUMENTED, EXAMPLES, tiny_tmpfs, tuner


def test_every_exit_code_is_defined_once_and_documented():
    defined = {v for k, v in vars(diagnostics).items() if k.startswith("EXIT_")}
    assert defined == DOCUMENTED
    for module in Path(__file__).resolve().parents[2].joinpath("tuner").rglob("*.py"):
        text = module.read_text()
        assert "EXIT_USAGE = " not in text and "EXIT_INVALID = " not in text, module  # imported, not redefined


def test_an_internal_error_is_one_line_exit_70_and_a_saved_traceback(monkeypatch, tmp_path):
    import tuner.commands.schema as schema_cmd

    def bug(args):
        raise KeyError("a bug")

    monkeypatch.setattr(schema_cmd, "run", bug)  # fault injection: a bug in a command
    code, out, err = tuner("schema")
    assert code == EXIT_INTERNAL
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "internal error (a bug in tuner" in lines[0] and "Traceback" not in err
    saved = Path(lines[0].rsplit("traceback saved to ", 1)[1])
    assert saved.is_file() and "KeyError: 'a bug'" in saved.read_text()


@pytest.mark.parametrize("command, missing, hint", [
    (["wizard", "s.toml"], "textual", "pip install 'tuner-train[tui]'"),
    (["run", "build", "--max-steps", "1"], "accelerate", "pip install 'tuner-train[runtime]'"),
])
def test_a_missing_optional_package_names_the_extra(tmp_path, command, missing, hint):
    """Installed without an extra, `tuner` and `tuner run` say what to install (exit 2), never
    a traceback. The package is made unimportable in a fresh interpreter (None in sys.modules)."""
    code = (f"import sys; sys.modules[{missing!r}] = None\n"
            f"from tuner.commands.cli import main; sys.exit(main({command!r}))")
    (tmp_path / "ddp.toml").write_text((EXAMPLES / "ddp.toml").read_text())  # its output stays in tmp_path
    assert tuner("compile", tmp_path / "ddp.toml", "--out", tmp_path / "build")[0] == EXIT_OK
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == EXIT_USAGE and hint in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_piped_into_head_exits_quietly():
    # bash reports the pipeline's last command; PIPESTATUS gives tuner's own status.
    # `true` exits before tuner has started, so tuner's first write meets a closed pipe
    # (with `head`, a schema that fits the pipe buffer would be written before head exits).
    p = subprocess.run(f"{sys.executable} -m tuner schema | true; echo \"rc=${{PIPESTATUS[0]}}\"", shell=True,
                       capture_output=True, text=True, executable="/bin/bash", timeout=60)
    assert f"rc={EXIT_BROKEN_PIPE}" in p.stdout, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr


# --- full and read-only disks ------------------------------------------------------------

def test_dev_full_error_reads_no_space_left_naming_the_path():
    """The message every command prints for ENOSPC, from a real failed write (/dev/full);
    the tmpfs tests below fill a real file system under the commands themselves."""
    from tuner.compiler.read.files import describe_os_error

    try:
        with open("/dev/full", "w") as fh:
            fh.write("x")
            fh.flush()
    except OSError as exc:
        exc.filename = "/dev/full"
        assert describe_os_error(exc).startswith("No space left on device: /dev/full")
    else:  # pragma: no cover
        pytest.skip("/dev/full does not fail writes here")


@pytest.fixture
def tiny_fs(tmp_path):
    """A 32 KiB tmpfs (root only), filled to the brim by the test that wants it full."""
    with tiny_tmpfs(tmp_path / "mnt", 32) as mnt:
        yield mnt


def _fill(mnt: Path) -> None:
    fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"x" * 1024):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def test_full_disk_compile_and_import_name_the_path(tiny_fs, tmp_path):
    _fill(tiny_fs)
    code, out, err = tuner("compile", EXAMPLES / "zero1.toml", "--out", tiny_fs / "build")
    assert code == EXIT_USAGE and "No space left on device" in err and str(tiny_fs / "build") in err, err
    assert [p.name for p in (tiny_fs / "build").iterdir()] == []  # no temporary files
    (tmp_path / "n.json").write_text('{"--num_processes": 2, "--model_family": "sdxl"}')  # a SimpleTuner flat config
    code, out, err = tuner("import", tmp_path / "n.json", "-o", tiny_fs / "settings.toml")
    assert code == EXIT_USAGE and "No space left on device" in err and str(tiny_fs) in err, err
    assert sorted(p.name for p in tiny_fs.iterdir()) == ["build", "filler"]


def test_read_only_output_dir_is_refused_before_any_rank_starts(tiny_fs, tmp_path):
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True)
    settings = write_tiny_run(tmp_path / "ro")
    settings.write_text(settings.read_text().replace('dir = "out"', f'dir = "{tiny_fs}/out"'))
    start = time.monotonic()
    code, out, err = tuner("run", settings)
    assert code == EXIT_USAGE and "Read-only file system" in err and str(tiny_fs / "out") in err, err
    assert time.monotonic() - start < 10  # refused at once: no rank, no torch


# --- damaged checkpoints -------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("damage", ["meta", "state-empty", "state-truncated", "state-missing"])
def test_a_damaged_latest_checkpoint_names_the_last_intact_one(finished_run, tmp_path, damage):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run, ignore=shutil.ignore_patterns(".tuner-run.lock"))
    step4 = run / "out" / "checkpoints" / "step-4"
    state = step4 / "model.safetensors"
    if damage == "meta":
        (step4 / "tuner_checkpoint.json").write_text('{"step": 4')
    elif damage == "state-empty":
        state.write_bytes(b"")
    elif damage == "state-truncated":
        state.write_bytes(state.read_bytes()[:1000])
    else:
        state.unlink()
    intact = run / "out" / "checkpoints" / "step-2"
    # refused before any rank starts, by `tuner run` itself (a truncated file by its recorded size)
    code, out, err = tuner("run", run / "settings.toml", "--resume", "latest")  # compiles run/build -> run/out
    assert code == EXIT_USAGE, err
    assert f"the last intact one is {intact}" in err and f"--resume {intact}" in err, err
    if damage == "state-truncated":
        assert "model.safetensors is 1000 bytes; it had" in err, err
    code, out, err = tuner("checkpoint", "export", run / "out" / "checkpoints", "--out", tmp_path / "export",
                           timeout_s=300)  # in this process: an export starts no rank
    assert code == EXIT_USAGE and f"the last intact one is {intact}" in err, err
    assert "Traceback" not in err and not (tmp_path / "export").exists()


# --- one run per output directory ------------------------------------------------------------------

@pytest.mark.slow
def test_a_second_run_is_refused_while_the_first_lives_and_a_killed_run_leaves_no_lock(tmp_path):
    settings = write_tiny_run(tmp_path / "lock", steps=400)
    cwd = settings.parent
    first = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(settings)], cwd=cwd, env=run_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (cwd / "out" / "metrics.jsonl").is_file():  # the first run is training
            assert first.poll() is None, first.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.5)
        second = harness.tuner('run', str(settings), '--max-steps', '1', cwd=cwd, timeout=120)
        assert second.returncode == EXIT_USAGE, second.stderr
        assert f"another tuner run is using {cwd / 'out'} (pid {first.pid}" in second.stderr
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the run and its ranks, all at once
        first.wait(timeout=60)
    for left in (cwd / "out").iterdir():  # the killed run's files (a fresh run is refused beside them)
        if left.name != ".tuner-run.lock":
            shutil.rmtree(left) if left.is_dir() else left.unlink()
    third = harness.tuner('run', str(settings), '--max-steps', '1', cwd=cwd, timeout=300)
    assert third.returncode == EXIT_OK, third.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["metadata-missing", "metadata-empty", "metadata-truncated", "shard-truncated"])
def test_export_of_a_damaged_sharded_checkpoint_is_a_clear_error(finished_fsdp_run, tmp_path, damage):
    ckpt = tmp_path / "step-2"
    shutil.copytree(finished_fsdp_run / "out" / "checkpoints" / "step-2", ckpt)
    dcp = ckpt / "pytorch_model_fsdp_0"
    target = dcp / (".metadata" if damage.startswith("metadata") else "__0_0.distcp")
    if damage.endswith("missing"):
        target.unlink()
    elif damage.endswith("empty"):
        target.write_bytes(b"")
    else:
        target.write_bytes(target.read_bytes()[: max(1, target.stat().st_size // 3)])
    code, out, err = tuner("checkpoint", "export", ckpt, "--out", tmp_path / "export", timeout_s=300)
    assert code == EXIT_USAGE and f"checkpoint {ckpt} is damaged" in err, err
    assert "Traceback" not in err and not (tmp_path / "export").exists()
