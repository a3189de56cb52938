"""A build runs from any working directory and wherever the project is copied, and `tuner run`
refuses a build whose artefacts were edited after compiling (issue 9, item 8)."""

from __future__ import annotations

import json
import shutil

import pytest
from runtime_helpers import merged, to_toml, write_data

from tests import harness

TINY_DS = merged(hardware={"num_processes": 1}, deepspeed={"enabled": True, "zero_stage": 1},
                 training={"max_steps": 2, "warmup_steps": 0, "validation_every": 0},
                 checkpoint={"every_steps": 0, "export": False})


def _project(d, settings=TINY_DS):
    d.mkdir(parents=True)
    write_data(d)
    (d / "settings.toml").write_text(to_toml(settings))
    # a relative NVMe path, checked against the project (not the cwd) and kept relative
    (d / "swap").mkdir()
    return d


def _tuner(*args, cwd, timeout=600):
    return harness.tuner(*args, cwd=cwd, timeout=timeout)


def test_two_working_directories_give_byte_identical_artefacts(tmp_path):
    settings = merged(deepspeed={"enabled": True, "zero_stage": 3, "offload_param": "nvme", "nvme_path": "swap"},
                      hardware={"platform": "cuda", "num_processes": 2})
    proj = _project(tmp_path / "proj", settings)
    other = tmp_path / "elsewhere"
    other.mkdir()
    builds = []
    for cwd, target in ((proj, "settings.toml"), (other, str(proj / "settings.toml")), ("/", str(proj / "settings.toml"))):
        r = _tuner("compile", target, "-q", cwd=cwd)
        assert r.returncode == 0, r.stderr
        builds.append({p.name: p.read_bytes() for p in sorted((proj / "build").iterdir())})
    assert builds[0] == builds[1] == builds[2]
    ds = json.loads(builds[0]["deepspeed.json"])
    assert ds["zero_optimization"]["offload_param"]["nvme_path"] == "swap"  # kept as written, relative
    assert b"deepspeed_config_file: build/deepspeed.json" in builds[0]["accelerate.yaml"]
    assert json.loads(builds[0]["manifest.json"])["settings_file"] == "../settings.toml"


@pytest.mark.slow  # starts a rank process (tests/tiers.py)
def test_copied_build_runs_from_the_root_directory(tmp_path):
    """Compiled in one place, copied with the project, the original removed: `tuner run BUILD`
    from / reads data, writes output and finds deepspeed.json inside the copy."""
    proj = _project(tmp_path / "ci" / "proj")
    r = _tuner("compile", "settings.toml", "-q", cwd=proj)
    assert r.returncode == 0, r.stderr
    copy = tmp_path / "train-host" / "proj"
    shutil.copytree(proj, copy)
    shutil.rmtree(tmp_path / "ci")
    run = _tuner("run", str(copy / "build"), cwd="/")
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    metrics = [json.loads(x) for x in (copy / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "loss" in m] == [1, 2]
    assert not (tmp_path / "ci").exists()


@pytest.mark.parametrize("edit", ["accelerate.yaml", "deepspeed.json", "manifest_version"])
def test_edited_build_is_refused_with_the_fix(tmp_path, edit):
    proj = _project(tmp_path / "proj")
    assert _tuner("compile", "settings.toml", "-q", cwd=proj).returncode == 0
    build = proj / "build"
    if edit == "manifest_version":
        manifest = json.loads((build / "manifest.json").read_text())
        manifest["manifest_version"] = 1
        (build / "manifest.json").write_text(json.dumps(manifest))
    else:
        (build / edit).write_text((build / edit).read_text().replace("1", "2", 1))
    r = _tuner("run", str(build), cwd=proj)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "re-run `tuner compile`" in r.stderr
    assert (edit in r.stderr and "was changed after" in r.stderr) if edit != "manifest_version" else (
        "manifest_version 1" in r.stderr)
