"""Issue 27 item 10: inputs that ended in an internal error (exit 70) now end with a message
naming the key or file and exit 1 (invalid settings) or 2 (usage / I/O). One test per case,
through the real command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.reliability.rel_helpers import assert_honest, tuner
from tuner.compiler.diagnostics import EXIT_INVALID, EXIT_OK, EXIT_USAGE

CPU = '[hardware]\nplatform = "cpu"\n'


def _compile(tmp_path: Path, text: str, *extra: str) -> tuple[int, str]:
    settings = tmp_path / "settings.toml"
    settings.write_text(CPU + text, encoding="utf-8")
    argv = ("compile", settings, "--out", tmp_path / "build", *extra)
    code, out, err = tuner(*argv)
    assert_honest(code, out, err, argv)
    return code, out + err


@pytest.mark.parametrize(("text", "key"), [
    ('[deepspeed]\nenabled = true\nconfig = {zero_optimization = {stage = 2}, when = 1979-05-27T07:32:00Z}\n',
     "deepspeed.config.when"),
    ('[deepspeed]\nenabled = true\nconfig = {zero_optimization = {stage = 2, at = 07:32:00}}\n',
     "deepspeed.config.zero_optimization.at"),
    ("[accelerate]\nparallelism_config = {parallelism_config_tp_size = 1979-05-27}\n",
     "accelerate.parallelism_config.parallelism_config_tp_size"),
    ("[accelerate]\nparallelism_config = {parallelism_config_tp_size = nan}\n",
     "accelerate.parallelism_config.parallelism_config_tp_size"),
    ("[accelerate]\nparallelism_config = {parallelism_config_tp_size = -inf}\n",
     "accelerate.parallelism_config.parallelism_config_tp_size"),
])
def test_toml_dates_and_nan_inside_tables_are_refused(tmp_path, text, key):
    code, text_out = _compile(tmp_path, text)
    assert code == EXIT_INVALID, text_out
    assert f"[{key}]" in text_out


@pytest.mark.parametrize(("section", "key"), [("model", "path"), ("output", "dir"), ("data", "path"),
                                              ("deepspeed", "config"), ("accelerate", "base")])
def test_unknown_user_in_a_path_is_refused_naming_the_key(tmp_path, section, key):
    extra = "enabled = true\n" if section == "deepspeed" else ""
    code, out = _compile(tmp_path, f'[{section}]\n{extra}{key} = "~nosuchuser-tuner/x"\n')
    assert code == EXIT_INVALID, out
    assert f"[{section}.{key}]" in out and "~nosuchuser-tuner" in out


def test_symlink_loop_as_out(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    settings = tmp_path / "s.toml"
    settings.write_text(CPU)
    for out in (tmp_path / "a", tmp_path / "a" / "build"):
        code, o, e = tuner("compile", settings, "--out", out)
        assert_honest(code, o, e)
        assert code == EXIT_USAGE and "symbolic links" in e, e


@pytest.mark.parametrize("argv", [["schema"], ["compile", "SETTINGS"]])
def test_stdout_closed(tmp_path, argv):
    settings = tmp_path / "s.toml"
    settings.write_text(CPU)
    argv = [str(settings) if a == "SETTINGS" else a for a in argv]
    p = subprocess.run(["bash", "-c", 'exec "$@" >&-', "bash", sys.executable, "-m", "tuner", *argv],
                       capture_output=False, stderr=subprocess.PIPE, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == EXIT_USAGE, p.stderr
    assert "standard output is closed" in p.stderr and "Traceback" not in p.stderr


def test_lone_surrogate_in_imported_json(tmp_path):
    src = tmp_path / "args.json"
    src.write_text('{"output_dir": "x\\udc80", "fsdp": "full_shard", "per_device_train_batch_size": 2}')
    argv = ("import", src, "-o", tmp_path / "settings.toml")
    code, out, err = tuner(*argv)
    assert_honest(code, out, err, argv)
    assert code in (EXIT_INVALID, EXIT_USAGE) and "lone surrogate" in err, err
    assert not (tmp_path / "settings.toml").exists()


def test_lone_surrogate_in_a_deepspeed_config_file(tmp_path):
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2}, "note": "\\udc80"}')
    code, out = _compile(tmp_path, '[deepspeed]\nenabled = true\nconfig = "ds.json"\n')
    assert code == EXIT_INVALID and "[deepspeed.config]" in out and "lone surrogate" in out, out


def _base(tmp_path: Path, text: str) -> tuple[int, str]:
    (tmp_path / "base.yaml").write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\n"
                                        "num_processes: 2\n" + text)
    return _compile(tmp_path, 'num_processes = 2\n[accelerate]\nbase = "base.yaml"\n')


@pytest.mark.parametrize("written", ["0", "[0, 1]"])
def test_base_gpu_ids_in_accelerates_other_forms_reach_its_launcher_as_text(tmp_path, written):
    """gpu_ids: 0 or [0, 1] made accelerate's launcher fail at `tuner run` ('int' object has no
    attribute 'split'); written as accelerate's string form, its own launch code accepts it."""
    code, out = _base(tmp_path, f"gpu_ids: {written}\n")
    assert code == EXIT_OK, out
    assert isinstance(yaml.safe_load((tmp_path / "build" / "accelerate.yaml").read_text())["gpu_ids"], str)
    from tuner.runtime.artefacts import load
    from tuner.runtime.launch_env import accelerate_env

    accelerate_env(load(tmp_path / "build"))  # accelerate's own launch-time derivation


@pytest.mark.parametrize("text", ["gpu_ids: 0,x\n", "dynamo_config:\n  dynamo_backend: NOSUCH\n",
                                  "dynamo_backend: 3\n"])
def test_base_values_accelerate_would_crash_on_are_refused(tmp_path, text):
    code, out = _base(tmp_path, text)
    assert code == EXIT_INVALID and "[accelerate.base]" in out, out
