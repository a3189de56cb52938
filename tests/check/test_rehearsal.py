"""`tuner check BUILD SCRIPT`: the rehearsal on 2 real gloo ranks, with the observer the
bootstrap installs, on the seeded silent faults of tests/check/faults/.

Each fault script is a plain accelerate script that exits 0 under `tuner launch` and
trains the wrong way in one respect. To launch once per build instead of once per fault,
`faults/driver.py` runs the build's scripts one after the other in the same ranks (each
builds its own Accelerator, so the report has one group per script, in order); the first
is the build's correct control, which must pass. The same driver under plain `tuner
launch` shows every script ends with exit 0 without the check.
"""

from __future__ import annotations

import json

import pytest
from check_helpers import CPU2, FAULTS, check, compile_build, faults

from tests.launch.launch_helpers import HERE as LAUNCH_TESTS
from tests.launch.launch_helpers import tuner

pytestmark = pytest.mark.slow

#: build -> (settings sections, control script, {fault script: the check that must name it}).
CATALOGUE = {
    "ddp": ({}, "clean.py", {
        "unprepared_loader.py": "data-sharded", "same_seed_synthetic.py": "data-sharded",
        "model_not_prepared.py": "prepared", "frozen_by_name.py": "trainable", "lr_zero.py": "lr",
        "warmup_int_division.py": "lr", "nan_loss.py": "loss", "zero_mask.py": "grads", "clip_to_zero.py": "grads",
        "no_optimizer_step.py": "optimizer-step", "no_zero_grad.py": "optimizer-step",
        "frozen_in_optimizer.py": "optimizer-params", "unfrozen_after_optimizer.py": "optimizer-params",
        "optimizer_on_copy.py": "optimizer-params"}),
    "fsdp2": ({"fsdp": {"enabled": True, "version": 2, "auto_wrap_policy": "transformer",
                        "transformer_layer_cls_to_wrap": ["Linear"]}}, "clean.py", {
        "fsdp_model_unwrapped.py": "sharding", "dtype_mix_fsdp.py": "dtypes"}),
    "zero2": ({"deepspeed": {"enabled": True, "zero_stage": 2}, "training": {"micro_batch_size": 8}}, "clean.py", {
        "ds_batch_mismatch.py": "batch-arithmetic"}),
    "bf16_accum4": ({"training": {"mixed_precision": "bf16", "gradient_accumulation_steps": 4,
                                  "micro_batch_size": 2}}, "clean_accum4.py", {
        "mixed_precision_off.py": "mixed-precision", "no_accumulate.py": "optimizer-step"}),
}
#: Faults that need a launch of their own (they change the process's launch environment).
ALONE = {"world_alone.py": "world-size"}


def _driver(build, status, scripts, tmp_path, checked: bool):
    args = [str(build), str(FAULTS / "driver.py"), str(status), *scripts]
    if checked:  # every script's steps, not only the first three
        return check(*args, cwd=tmp_path, extra_env={"TUNER_CHECK_STEPS": "20"})
    return tuner("launch", *args, cwd=tmp_path, timeout=600)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_fault_catalogue(tmp_path, name):
    sections, control, expected = CATALOGUE[name]
    build = compile_build(tmp_path, CPU2, sections)
    scripts = [control, *expected]
    plain_scripts = scripts + (list(ALONE) if name == "ddp" else [])

    p = _driver(build, tmp_path / "plain.json", plain_scripts, tmp_path, checked=False)
    assert p.returncode == 0, p.stderr[-5000:]
    assert json.loads((tmp_path / "plain.json").read_text()) == {s: 0 for s in plain_scripts}

    rc, report, err = _driver(build, tmp_path / "checked.json", scripts, tmp_path, checked=True)
    assert rc == 1, err[-5000:]
    assert "rehearsal" not in faults(report), faults(report)["rehearsal"]
    assert faults(report, run=1) == {}, f"false alarm on the control {control}: {faults(report, run=1)}"
    for i, (script, want) in enumerate(expected.items(), start=2):
        got = faults(report, run=i)
        assert want in got, f"{script}: expected a {want} fault, got {sorted(got)}"
        assert all(f["fix"] for fs in got.values() for f in fs)


def test_world_of_one_per_rank(tmp_path):
    build = compile_build(tmp_path, CPU2)
    rc, report, err = check(str(build), str(FAULTS / "world_alone.py"), cwd=tmp_path)
    assert rc == 1, err[-3000:]
    got = faults(report)
    assert "world-size" in got and {f["where"] for f in got["world-size"]} == {"rank 0", "rank 1"}


def test_real_clients_pass(tmp_path):
    """accelerate's own test script and trl's SFTTrainer (tests/launch/hf_sft.py), unmodified."""
    pytest.importorskip("trl")
    import accelerate
    from tuner.runtime.families.causal_lm import bundled_dir

    build = compile_build(tmp_path, CPU2)
    test_script = f"{accelerate.__path__[0]}/test_utils/scripts/test_script.py"
    rc, report, err = check(str(build), test_script, cwd=tmp_path)
    assert rc == 0, (report.get("faults"), err[-3000:])
    rc, report, err = check(str(build), str(LAUNCH_TESTS / "hf_sft.py"), "--tokenizer",
                            str(bundled_dir() / "tokenizer"), "--out", str(tmp_path / "sft"), cwd=tmp_path)
    assert rc == 0, (report.get("faults"), err[-3000:])
    names = {f["check"] for f in report["findings"] if f["status"] == "ok"}
    assert {"world-size", "data-sharded", "optimizer-params", "grads", "params-change"} <= names


def test_tuners_own_trainer_on_the_fsdp2_example(tmp_path):
    """No script: the rehearsal runs tuner's trainer on the build's settings. Its per-rank
    model state is within 10% of the estimate and its lr follows the warmup schedule (the
    first warmup step at lr 0 is no false alarm for params-change); nothing is written into
    the run's output directory."""
    import shutil
    import subprocess
    import sys

    from check_helpers import env

    from tests.conftest import EXAMPLES

    shutil.copy(EXAMPLES / "fsdp2.toml", tmp_path / "fsdp2.toml")
    c = subprocess.run([sys.executable, "-m", "tuner", "compile", str(tmp_path / "fsdp2.toml"), "-q"],
                       capture_output=True, text=True, env=env(), timeout=120)
    assert c.returncode == 0, c.stderr
    rc, report, err = check(str(tmp_path / "build"), cwd=tmp_path)
    assert rc == 0, (report.get("faults"), err[-3000:])
    oks = {f["check"]: f["saw"] for f in report["findings"] if f["status"] == "ok"}
    assert "within 10%" in oks["memory"] and "follows the" in oks["lr"] and "DTensor" in oks["sharding"]
    assert not (tmp_path / "output").exists()


def test_two_machines_rehearse_together(tmp_path):
    """Two launchers on localhost (one rank each): they meet for the launch checks, then the
    rehearsal's ranks meet at the same port; each machine judges its own rank."""
    from check_helpers import finish, free_port, start, two_machines

    build = compile_build(tmp_path, two_machines(free_port()))
    procs = [start("--machine-rank", str(m), str(build), str(FAULTS / "clean.py"), cwd=tmp_path) for m in (0, 1)]
    results = [finish(p, timeout=600) for p in procs]
    for rc, report, err in results:
        assert rc == 0, (report.get("faults"), err[-3000:])
        saw = {f["check"]: f["saw"] for f in report["findings"] if f["status"] == "ok"}
        assert "world of 2" in saw["world-size"] and "2 machines" in saw.get("same-build", "")
