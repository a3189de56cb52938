"""`tuner check BUILD SCRIPT`: the rehearsal on 2 real gloo ranks, with the observer the
bootstrap installs, on the seeded silent faults of tests/check/faults/.

Each fault script is a plain accelerate script that trains the wrong way in one respect and
runs to its end with exit 0. To launch once per build instead of once per fault,
`faults/driver.py` runs the build's scripts one after the other in the same ranks (each
builds its own Accelerator, so the report has one group per script, in order): first the
build's correct controls, which must pass, then the faults, then (DDP build) the unmodified
real clients, accelerate's own test script and trl's SFTTrainer, which must pass too. The
driver's status file shows every script ended with exit 0: the faults are silent without
the check.
"""

from __future__ import annotations

import importlib.util
import json
from importlib import metadata

import pytest
from check_helpers import CPU2, FAULTS, check, compile_build, faults

from packaging.version import Version

from tests.launch.launch_helpers import HERE as LAUNCH_TESTS

pytestmark = pytest.mark.slow

#: peft >= 0.22's get_peft_model_state_dict gathers FSDP2's DTensor shards: a collective.
PEFT_GATHERS = importlib.util.find_spec("peft") is not None and Version(metadata.version("peft")) >= Version("0.22")
FSDP2 = {"fsdp": {"enabled": True, "version": 2, "auto_wrap_policy": "transformer",
                  "transformer_layer_cls_to_wrap": ["Linear"]}}

#: The DDP build trains the model its settings name (./model, the shape of hf_sft.py's tiny
#: Llama) at a linear schedule: scripts that train it are compared with the estimate and the
#: schedule (faults/common.py: LR, WARMUP, MAX_STEPS).
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 512, "hidden_size": 32,
         "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
         "max_position_embeddings": 64}
SETTINGS_MODEL = {"model": {"path": "model"}, "training": {"learning_rate": 1e-3, "lr_scheduler": "linear",
                                                           "warmup_steps": 0, "max_steps": 6}}

#: build -> (settings sections, control scripts, {fault script: the check that must name it, or
#: (that check, words its finding must say: the cause)}).
CATALOGUE = {
    "ddp": (SETTINGS_MODEL, ["clean.py", "settings_model.py", "plain_loop.py", "packed_per_document.py",
                             "ema_exported.py", "resume_skips.py", "negatives_gathered.py"], {
        "unprepared_loader.py": "data-sharded", "same_seed_synthetic.py": "data-sharded",
        "model_not_prepared.py": "prepared", "frozen_by_name.py": "trainable", "lr_zero.py": "lr",
        "warmup_int_division.py": "lr", "nan_loss.py": "loss", "zero_mask.py": "grads", "clip_to_zero.py": "grads",
        "no_optimizer_step.py": "optimizer-step", "no_zero_grad.py": "optimizer-step",
        "frozen_in_optimizer.py": "optimizer-params", "unfrozen_after_optimizer.py": "optimizer-params",
        "optimizer_on_copy.py": "optimizer-params", "scheduler_before_step.py": ("lr", "scheduler.step() comes first"),
        "model_in_float64.py": "memory",
        # round 2 (issue 36)
        "unprepared_loader_unseeded.py": ("data-sharded", "every rank reads all"),
        "double_sharded.py": ("data-sharded", "shards it again"),
        "scheduler_per_process.py": ("lr", "the scheduler steps once per process"),
        "schedule_for_8_gpus.py": ("lr", "a world of 8 processes"),
        "packed_cross_document.py": ("packing", "attends to the documents packed before it"),
        "ema_not_exported.py": ("ema", "no save wrote it"),
        "resume_restarts_epoch.py": ("resume", "the epoch starts over"),
        "negatives_not_gathered.py": ("negatives", "gather_across_devices=False")}),
    "fsdp2": (FSDP2, ["clean.py", "clean_save_fsdp2.py"], {
        "fsdp_model_unwrapped.py": "sharding", "dtype_mix_fsdp.py": "dtypes",
        "save_sharded_state_dict.py": ("save", "FSDP2 shards (DTensors)"),
        # peft < 0.22 saves rank 0's shard of each adapter; from 0.22 the same script hangs (below)
        **({} if PEFT_GATHERS else {"peft_adapter_save_fsdp2.py": ("save", "FSDP2 shards (DTensors)")})}),
    "zero2": ({"deepspeed": {"enabled": True, "zero_stage": 2}, "training": {"micro_batch_size": 8}}, ["clean.py"], {
        "ds_batch_mismatch.py": "batch-arithmetic"}),
    "bf16_accum4": ({"training": {"mixed_precision": "bf16", "gradient_accumulation_steps": 4,
                                  "micro_batch_size": 2, **SETTINGS_MODEL["training"]}}, ["clean_accum4.py"], {
        "mixed_precision_off.py": "mixed-precision", "no_accumulate.py": "optimizer-step",
        "scheduler_per_micro_batch.py": ("lr", "the scheduler steps once per micro-batch")}),
}
#: Faults that need a launch of their own (they change the process's launch environment).
ALONE = {"world_alone.py": "world-size"}


def _clients(tmp_path) -> list[str]:
    """accelerate's own test script and (with trl) tests/launch/hf_sft.py on the settings' model,
    learning rate and steps: memory and lr are compared on it, not skipped."""
    import accelerate

    out = []
    if importlib.util.find_spec("trl"):
        from tuner.runtime.families.causal_lm import bundled_dir

        out.append("::".join([str(LAUNCH_TESTS / "hf_sft.py"), "--tokenizer", str(bundled_dir() / "tokenizer"),
                              "--out", str(tmp_path / "sft"), "--lr", "1e-3", "--steps", "6"]))
    return [*out, f"{accelerate.__path__[0]}/test_utils/scripts/test_script.py"]


def _oks(report: dict, run: int) -> dict[str, str]:
    return {f["check"]: f["saw"] for f in report["findings"] if f["status"] == "ok" and f["run"] == run}


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_fault_catalogue(tmp_path, name):
    sections, controls, expected = CATALOGUE[name]
    if name == "ddp":
        (tmp_path / "model").mkdir()
        (tmp_path / "model" / "config.json").write_text(json.dumps(LLAMA))
    build = compile_build(tmp_path, CPU2, sections)
    clients = _clients(tmp_path) if name == "ddp" else []
    scripts = [*controls, *expected, *clients]

    # Every script's steps, not only the first three: each runs to its end.
    rc, report, err = check(str(build), str(FAULTS / "driver.py"), str(tmp_path / "status.json"), *scripts,
                            cwd=tmp_path, extra_env={"TUNER_CHECK_STEPS": "20"})
    assert rc == 1, err[-5000:]
    status = json.loads((tmp_path / "status.json").read_text())
    # accelerate's test script trains more than 20 steps in one of its Accelerators: the rehearsal ends it there.
    assert status == {s.split("::")[0]: "stopped" if s.endswith("test_script.py") else 0 for s in scripts}, status
    assert "rehearsal" not in faults(report), faults(report)["rehearsal"]
    for i, control in enumerate(controls, start=1):
        assert faults(report, run=i) == {}, f"false alarm on the control {control}: {faults(report, run=i)}"
    for i, (script, want) in enumerate(expected.items(), start=len(controls) + 1):
        got = faults(report, run=i)
        check_name, words = want if isinstance(want, tuple) else (want, "")
        assert check_name in got, f"{script}: expected a {check_name} fault, got {sorted(got)}"
        assert all(f["fix"] for fs in got.values() for f in fs)
        said = " ".join(f["saw"] + " " + f["fix"] for f in got[check_name])
        assert words in said, f"{script}: the {check_name} finding does not say {words!r}: {said}"
    first_client = len(controls) + len(expected) + 1
    groups = {f["run"] for f in report["findings"]}
    for i in sorted(g for g in groups if g >= first_client):
        got = faults(report, run=i)
        if i >= max(groups) - 1 and set(got) == {"mixed-precision"}:
            # accelerate's test script ends with Accelerator(mixed_precision="bf16"), then "fp16",
            # on this fp32 build: the check names them, rightly.
            assert all("fp16" in f["saw"] or "bf16" in f["saw"] for f in got["mixed-precision"]), got
            continue
        assert got == {}, f"false alarm on a real client (Accelerator {i}): {got}"
    if name == "ddp":
        settings_model = _oks(report, 2)
        # the usual loop (shuffled, no seed, prepared) is judged by sample identity, and passes
        assert "sample identity" in _oks(report, 3)["data-sharded"], _oks(report, 3)
        assert "within 10%" in settings_model["memory"] and "follows the linear" in settings_model["lr"]
        if len(clients) == 2:  # trl's SFTTrainer on the settings' model and schedule: compared, and passes
            sft = _oks(report, first_client)
            assert "within 10%" in sft["memory"] and "follows the linear" in sft["lr"], sft
            assert {"world-size", "data-sharded", "optimizer-params", "grads", "params-change"} <= set(sft)


def test_world_of_one_per_rank(tmp_path):
    build = compile_build(tmp_path, CPU2)
    rc, report, err = check(str(build), str(FAULTS / "driver.py"), str(tmp_path / "status.json"), *ALONE,
                            cwd=tmp_path, extra_env={"TUNER_CHECK_STEPS": "20"})
    assert rc == 1, err[-3000:]
    assert json.loads((tmp_path / "status.json").read_text()) == {s: 0 for s in ALONE}
    got = faults(report)
    assert "world-size" in got and {f["where"] for f in got["world-size"]} == {"rank 0", "rank 1"}


@pytest.mark.parametrize("script,call", [
    ("state_dict_on_main_fsdp2.py", "get_state_dict"),
    pytest.param("peft_adapter_save_fsdp2.py", "get_peft_model_state_dict",
                 marks=pytest.mark.skipif(not PEFT_GATHERS, reason="peft < 0.22 does not gather (a silent save)"))])
def test_a_collective_on_the_main_process_only_is_named_not_waited_out(tmp_path, script, call):
    """A state-dict gather only the main process calls: the ranks wait in different
    collectives. The rehearsal bounds torch's default process-group timeout (TUNER_PG_TIMEOUT,
    here 15 s; torch's own is 30 minutes) and names each rank's line and call."""
    build = compile_build(tmp_path, CPU2, FSDP2)
    rc, report, err = check(str(build), str(FAULTS / "driver.py"), str(tmp_path / "status.json"), script,
                            cwd=tmp_path, timeout=240, extra_env={"TUNER_CHECK_STEPS": "20", "TUNER_PG_TIMEOUT": "15"})
    assert rc == 1, err[-3000:]
    got = faults(report)
    assert set(got) - {"trainable"} == {"collectives"}, got  # the LoRA script trains part of the model: trainable
    saw = got["collectives"][0]["saw"]
    # each rank that reported names its line (the elastic agent may stop one before it writes)
    assert f"rank 0 in {call}() at {script}:" in saw or f"rank 1 in wait_for_everyone() at {script}:" in saw, saw
    assert "rank 0 in wait_for_everyone" not in saw and f"rank 1 in {call}" not in saw, saw
    assert "timed out after 15 s" in saw and "every rank" in got["collectives"][0]["fix"]


def test_tuners_own_trainer_on_the_fsdp2_example(tmp_path):
    """No script: the rehearsal runs tuner's trainer on the build's settings. Its per-rank
    model state is within 10% of the estimate and its lr follows the warmup schedule (the
    first warmup step at lr 0 is no false alarm for params-change); nothing is written into
    the run's output directory."""
    import shutil

    from tuner.compiler.compile import compile_file

    from tests.conftest import EXAMPLES

    shutil.copy(EXAMPLES / "fsdp2.toml", tmp_path / "fsdp2.toml")
    compiled = compile_file(tmp_path / "fsdp2.toml")  # what `tuner compile` runs, in this process
    assert compiled.ok and compiled.write() == tmp_path / "build"
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
