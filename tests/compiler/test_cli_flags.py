"""Settings keys and the seeds' flat aliases as command-line options (registered from the
schema, so --help lists them): every spelling the seeds use, and no stray argument."""

from __future__ import annotations

import contextlib
import io

import pytest
import yaml
from tuner.commands.cli import main

SETTINGS = '[model]\npath = "builtin:tiny-llama"\n[hardware]\nplatform = "cpu"\nnum_processes = 2\n'


def _compile(tmp_path, *flags: str, after: tuple[str, ...] = ()) -> dict:
    (tmp_path / "s.toml").write_text(SETTINGS)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["compile", *flags, str(tmp_path / "s.toml"), *after, "--out", str(tmp_path / "b"), "-q"])
    assert code == 0, err.getvalue()
    return yaml.safe_load((tmp_path / "b" / "accelerate.yaml").read_text())


@pytest.mark.parametrize("flags", [
    ("--fsdp_enable", "--fsdp_version", "2"),          # a bare boolean before the settings file
    ("--fsdp_enable=true", "--fsdp_version=2"),
    ("--fsdp_enable", "true", "--fsdp_version", "v2"),
    ("--fsdp.enabled", "--fsdp.version", "2"),          # canonical keys too
])
def test_seed_flags_in_every_spelling(tmp_path, flags):
    cfg = _compile(tmp_path, *flags)
    assert cfg["distributed_type"] == "FSDP" and str(cfg["fsdp_config"]["fsdp_version"]) == "2"


def test_flags_after_the_settings_file_and_a_boolean_false(tmp_path):
    assert _compile(tmp_path, after=("--fsdp_version", "2", "--fsdp_enable"))["distributed_type"] == "FSDP"
    assert _compile(tmp_path, after=("--fsdp_enable", "false"))["distributed_type"] == "MULTI_CPU"


def test_help_lists_the_settings_flags(capsys):
    assert main(["compile", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--fsdp_version" in out and "--fsdp_enable" in out and "settings as flags" in out
