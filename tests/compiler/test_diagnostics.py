"""Bad input: exit 1 (or 2), every problem at once, file:line:col, no traceback, nothing written."""

from __future__ import annotations

import json

import pytest

from tests.conftest import EXAMPLES, run_tuner


@pytest.fixture()
def good_build(tmp_path):
    """A settings file with a good earlier build beside it."""
    settings = tmp_path / "settings.toml"
    settings.write_text((EXAMPLES / "zero1.toml").read_text())
    proc = run_tuner("compile", str(settings))
    assert proc.returncode == 0, proc.stderr
    build = tmp_path / "build"
    return settings, build, {p.name: p.read_bytes() for p in build.iterdir()}


BAD_INPUTS = {
    "malformed": ("[fsdp]\nenabled = tru\n", "invalid TOML", ":2:"),
    "wrong_type": ("[training]\nmicro_batch_size = 'four'\n", "must be an integer", ":2:1"),
    "unknown_key": ("fsdp_verison = 2\n", "did you mean fsdp_version", ":1:1"),
    "bad_enum": ("[training]\nmixed_precision = 'fp8'\n", 'must be one of "no", "fp16", "bf16"', ":2:1"),
    "conflict": ("fsdp_enable = true\n[deepspeed]\nenabled = true\n", "cannot be enabled simultaneously", ":1:1"),
    "not_a_table": ("fsdp = 3\n", "[fsdp] must be a table", ":1:1"),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_settings_exit_1_without_traceback_and_keep_the_old_build(name, good_build):
    settings, build, before = good_build
    text, expected, position = BAD_INPUTS[name]
    settings.write_text(text)
    proc = run_tuner("compile", str(settings))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert expected in proc.stderr
    assert f"{settings}{position}" in proc.stderr
    assert {p.name: p.read_bytes() for p in build.iterdir()} == before


def test_every_problem_is_reported_in_one_run(tmp_path):
    settings = tmp_path / "s.toml"
    settings.write_text("fsdp_verison = 2\n[training]\nmicro_batch_size = -1\nmixed_precision = 'fp8'\n"
                        "[hardware]\nnum_processes = 'many'\n[fsdp]\nenabled = true\n[deepspeed]\nenabled = true\n")
    proc = run_tuner("compile", str(settings), "--format", "json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    keys = {d["key"] for d in report["diagnostics"] if d["severity"] == "error"}
    assert {"fsdp_verison", "training.micro_batch_size", "training.mixed_precision",
            "hardware.num_processes", "fsdp.enabled"} <= keys
    assert report["ok"] is False


def test_json_format_carries_position_key_and_fix(tmp_path):
    settings = tmp_path / "s.toml"
    settings.write_text("\n\n[fsdp]\n  versoin = 2\n")
    report = json.loads(run_tuner("compile", str(settings), "--format", "json").stdout)
    (d,) = [d for d in report["diagnostics"] if d["severity"] == "error"]
    assert (d["line"], d["column"], d["key"]) == (4, 3, "fsdp.versoin")
    assert d["fix"] == "did you mean fsdp.version?"


def test_missing_file_and_bad_usage_exit_2(tmp_path):
    proc = run_tuner("compile", str(tmp_path / "nope.toml"))
    assert proc.returncode == 2 and "not found" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_tuner("compile")
    assert proc.returncode == 2 and "usage" in proc.stderr


def test_unwritable_output_is_an_io_error(tmp_path):
    settings = tmp_path / "s.toml"
    settings.write_text("num_processes = 2\n")
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the build directory should go")
    proc = run_tuner("compile", str(settings), "--out", str(blocker / "build"))
    assert proc.returncode == 2 and "cannot write" in proc.stderr and "Traceback" not in proc.stderr


def test_not_utf8_is_a_clear_error(tmp_path):
    settings = tmp_path / "s.toml"
    settings.write_bytes(b"num_processes = 2 # \xff\xfe\n")
    proc = run_tuner("compile", str(settings))
    assert proc.returncode == 1 and "UTF-8" in proc.stderr


def test_deepspeed_config_file_errors_name_the_file(tmp_path):
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2}\n "fp16": {}}')
    settings = tmp_path / "s.toml"
    settings.write_text("deepspeed_config = 'ds.json'\n")
    proc = run_tuner("compile", str(settings))
    assert proc.returncode == 1
    assert "ds.json:2:2: invalid JSON" in proc.stderr
    settings.write_text("deepspeed_config = 'missing.json'\n")
    assert "DeepSpeed config file not found" in run_tuner("compile", str(settings)).stderr


def test_a_replaced_key_says_what_to_write_instead(tmp_path):
    """model.load_in_4bit was merged into model.base_precision: an old file is still refused as an
    unknown key (the same exit), but told the exact line to write, through the real command line."""
    settings = tmp_path / "s.toml"
    settings.write_text("[model]\nload_in_4bit = true\n")
    proc = run_tuner("compile", str(settings), "--format", "json")
    settings.write_text("[model]\nlora_rnk = 4\n")
    assert proc.returncode == run_tuner("compile", str(settings)).returncode == 1, proc.stdout + proc.stderr
    (d,) = [d for d in json.loads(proc.stdout)["diagnostics"] if d["severity"] == "error"]
    assert (d["line"], d["key"]) == (2, "model.load_in_4bit")
    assert d["message"] == "unknown key 'load_in_4bit' in [model]: model.base_precision replaced it"
    assert d["fix"] == 'write model.base_precision = "nf4-bnb" instead'
    settings.write_text("")
    proc = run_tuner("compile", str(settings), "--set", "load_in_4bit=false")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert 'remove it: model.base_precision = "no_change", the default, is what it meant' in proc.stderr
