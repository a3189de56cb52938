"""Issue 11's data-loss cases: tuner deletes or overwrites only what it wrote."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from tuner.compiler.compile import compile_text
from tuner.compiler.diagnostics import EXIT_OK, EXIT_USAGE

from tests.reliability.rel_helpers import EXAMPLES, tiny_tmpfs, tuner

ZERO1 = (EXAMPLES / "zero1.toml").read_text(encoding="utf-8")
DDP = (EXAMPLES / "ddp.toml").read_text(encoding="utf-8")


def _settings(d: Path, text: str, name: str = "settings.toml") -> Path:
    p = d / name
    p.write_text(text, encoding="utf-8")
    return p


# --- tuner compile ----------------------------------------------------------------------

def test_compile_out_dot_keeps_a_deepspeed_json_tuner_did_not_write(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "deepspeed.json"
    mine.write_text('{"mine": true}\n', encoding="utf-8")
    ddp = _settings(tmp_path, DDP)
    code, out, err = tuner("compile", ddp, "--out", ".")
    assert code == EXIT_OK, err
    assert mine.read_text() == '{"mine": true}\n'  # a DDP build removes only a deepspeed.json it wrote
    zero = _settings(tmp_path, ZERO1, "zero.toml")
    code, out, err = tuner("compile", zero, "--out", ".")
    assert code == EXIT_USAGE and "deepspeed.json exists and was not written by tuner" in err
    assert mine.read_text() == '{"mine": true}\n'


def test_compile_out_empty_string_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deepspeed.json").write_text("{}", encoding="utf-8")
    code, out, err = tuner("compile", _settings(tmp_path, DDP), "--out", "")
    assert code == EXIT_USAGE and "--out: is empty" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deepspeed.json", "settings.toml"]


def test_compile_removes_its_own_stale_deepspeed_json_only(tmp_path):
    out = tmp_path / "build"
    assert tuner("compile", _settings(tmp_path, ZERO1), "--out", out)[0] == EXIT_OK
    assert (out / "deepspeed.json").is_file()
    assert tuner("compile", _settings(tmp_path, DDP), "--out", out)[0] == EXIT_OK
    assert not (out / "deepspeed.json").exists()  # tuner wrote it, the manifest said so
    assert tuner("compile", _settings(tmp_path, ZERO1), "--out", out)[0] == EXIT_OK
    (out / "deepspeed.json").write_text('{"edited": 1}', encoding="utf-8")  # a hand edit
    assert tuner("compile", _settings(tmp_path, DDP), "--out", out)[0] == EXIT_OK
    assert (out / "deepspeed.json").read_text() == '{"edited": 1}'  # not what tuner wrote: kept


def test_artefacts_are_0644_and_no_temporary_files_remain(tmp_path):
    out = tmp_path / "build"
    assert tuner("compile", _settings(tmp_path, ZERO1), "--out", out)[0] == EXIT_OK
    for p in out.iterdir():
        assert not p.name.startswith("."), p
        assert stat.S_IMODE(p.stat().st_mode) == 0o644, p


def test_a_failure_part_way_leaves_the_previous_set_and_no_temporaries(tmp_path):
    """Real failure: the second artefact does not fit on a tiny file system."""
    with tiny_tmpfs(tmp_path / "mnt", 24) as mnt:
        out = mnt / "build"
        first = compile_text(DDP, path=tmp_path / "s.toml", out_dir=out)
        first.write()
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        (mnt / "filler").write_bytes(b"x" * (24 * 1024 - 4096 * 3))  # room for about one more small file
        second = compile_text(ZERO1, path=tmp_path / "s.toml", out_dir=out)
        with pytest.raises(OSError) as info:
            second.write()
        assert "No space" in os.strerror(info.value.errno) and info.value.filename
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the old set, nothing else


def test_a_failed_move_puts_the_previous_set_back(tmp_path, monkeypatch):
    """Fault injection (a rename failing cannot be provoked for real): the manifest's move
    fails after the YAML moved; the previous set is restored and no temporaries remain."""
    from tuner.compiler.artefacts import build_writer, emit

    out = tmp_path / "build"
    compile_text(ZERO1, path=tmp_path / "s.toml", out_dir=out).write()
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real_replace = os.replace

    def failing_replace(src, dst):
        if Path(dst).name == emit.MANIFEST_JSON:
            raise OSError(5, "Input/output error", str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(build_writer.os, "replace", failing_replace)
    with pytest.raises(OSError):
        compile_text(ZERO1.replace("micro_batch_size = 4", "micro_batch_size = 2"), path=tmp_path / "s.toml",
                     out_dir=out).write()
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# --- tuner run --max-steps ------------------------------------------------------------------

@pytest.mark.parametrize("steps", ["0", "-1"])
def test_run_max_steps_below_one_is_refused_and_nothing_is_exported(tmp_path, steps):
    settings = _settings(tmp_path, DDP)
    code, out, err = tuner("run", settings, "--max-steps", steps)
    assert code == EXIT_USAGE and "--max-steps: must be 1 or more" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.toml"]  # no build, no output/final


# --- tuner checkpoint export ------------------------------------------------------------------

def _export(ckpt: Path, out: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    """`tuner checkpoint export` in this process, from `cwd` (an export starts no rank)."""
    with contextlib.chdir(cwd):
        code, o, e = tuner("checkpoint", "export", ckpt, "--out", out, timeout_s=300)
    return subprocess.CompletedProcess(["tuner", "checkpoint", "export"], code, o, e)


@pytest.mark.slow
def test_export_never_deletes_a_persons_files(finished_run, tmp_path):
    ckpt = finished_run / "out" / "checkpoints" / "step-4"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me", encoding="utf-8")
    (tmp_path / "file.bin").write_bytes(b"data")

    p = _export(ckpt, mine, tmp_path)  # a non-empty folder that is no export: refused, untouched
    assert p.returncode == EXIT_USAGE and "not an earlier tuner export" in p.stderr
    assert [x.name for x in mine.iterdir()] == ["notes.txt"]
    p = _export(ckpt, ".", tmp_path)  # the working directory: refused the same way, no traceback
    assert p.returncode == EXIT_USAGE and "Traceback" not in p.stderr
    p = _export(ckpt, tmp_path / "file.bin", tmp_path)  # a file: refused, no file.bin.tmp/
    assert p.returncode == EXIT_USAGE and "is a file" in p.stderr and "Traceback" not in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["file.bin", "mine"]

    out = tmp_path / "export"
    assert _export(ckpt, out, tmp_path).returncode == EXIT_OK
    record = json.loads((out / "tuner_export.json").read_text())
    assert "model.safetensors" in record["entries"]
    (out / "README.md").write_text("mine", encoding="utf-8")  # the person adds a file
    assert _export(finished_run / "out" / "checkpoints" / "step-2", out, tmp_path).returncode == EXIT_OK
    assert (out / "README.md").read_text() == "mine"  # an earlier export is updated, the person's file kept
    assert json.loads((out / "tuner_export.json").read_text())["checkpoint"].endswith("step-2")
    assert not [x for x in out.iterdir() if x.name.startswith(".tuner-export-")]
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(out)  # still a model from_pretrained loads
