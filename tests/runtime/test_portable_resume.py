"""Portable resume on real gloo ranks: a checkpoint continues at another world size (issue 33).

One reference run (FSDP2, 4 ranks, global batch 8 = micro 2 x accumulation 1 x 4) saves a
checkpoint every 2 steps and goes on to step 8: it is both the uninterrupted reference and
the checkpoint the others resume from. 4 -> 2 ranks resumes its step 4 at micro 4 x
accumulation 1 x 2 (the same global batch); 2 -> 4 resumes that run's step 6 on 4 ranks again.
(The micro batch, not the accumulation, takes up the change: tuner's causal LM loss counts the
trained tokens across the ranks of one micro-step, so trading ranks for accumulation steps
trains the same samples but weighs their tokens slightly differently; docs/runtime.md.)
The losses after each resume equal the reference's within `LOSS_RTOL`, and `tuner checkpoint
verify` (the user's continuation check) passes them and fails a resume that drops the
optimizer state or the data position.
"""

from __future__ import annotations

import pytest
from runtime_helpers import assert_ok, merged, tuner_run

pytestmark = pytest.mark.slow

#: Losses after a resume at another world size vs the uninterrupted run (relative): fp32,
#: only the order of the reductions differs.
LOSS_RTOL = 1e-4

FSDP = {"enabled": True, "version": 2, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}


def fsdp_settings(world: int, micro: int, accum: int) -> dict:
    return merged(fsdp=FSDP, hardware={"platform": "cpu", "num_processes": world},
                  training={"micro_batch_size": micro, "gradient_accumulation_steps": accum, "max_steps": 8,
                            "validation_every": 0, "lr_scheduler": "constant"},
                  checkpoint={"every_steps": 2, "keep_last": 4, "export": False})


@pytest.fixture(scope="module")
def reference(runtime_tmp):
    run = tuner_run(runtime_tmp / "portable-ref-fsdp2-w4", fsdp_settings(4, 2, 1), trace=False)
    assert_ok(run)
    return run


@pytest.fixture(scope="module")
def four_to_two(reference, runtime_tmp):
    run = tuner_run(runtime_tmp / "portable-fsdp2-4to2", fsdp_settings(2, 4, 1), "--resume",
                    str(reference.out / "checkpoints" / "step-4"), trace=False)
    assert_ok(run)
    return run


@pytest.fixture(scope="module")
def two_to_four(four_to_two, runtime_tmp):
    run = tuner_run(runtime_tmp / "portable-fsdp2-2to4", fsdp_settings(4, 2, 1), "--resume",
                    str(four_to_two.out / "checkpoints" / "step-6"), trace=False)
    assert_ok(run)
    return run


def assert_same_losses(resumed, reference, steps, rtol=LOSS_RTOL):
    got, want = resumed.losses(), reference.losses()
    assert sorted(got) == list(steps), got
    for step in steps:
        assert abs(got[step] - want[step]) <= rtol * abs(want[step]), (step, got, want)


def test_fsdp2_four_to_two_ranks_continues_the_same_training(four_to_two, reference):
    assert "global batch kept: 8 (micro_batch_size 2 x gradient_accumulation_steps 1 x 4 ranks)" in four_to_two.output
    assert "resumed from" in four_to_two.output and "(epoch 0, batch 4)" in four_to_two.output  # 32 samples / (4 x 2)
    assert_same_losses(four_to_two, reference, range(5, 9))


def test_fsdp2_two_to_four_ranks_continues_the_same_training(two_to_four, reference):
    assert "resumed from" in two_to_four.output and "(epoch 0, batch 6)" in two_to_four.output  # 48 / (2 x 4)
    assert_same_losses(two_to_four, reference, range(7, 9))


def verify(reference, resumed, *extra):
    import subprocess
    import sys

    from runtime_helpers import tuner_env

    return subprocess.run([sys.executable, "-m", "tuner", "checkpoint", "verify", str(reference.out),
                           str(resumed.out), *extra], capture_output=True, text=True, env=tuner_env(), timeout=300)


def test_continuation_check_passes_the_world_size_changes(four_to_two, two_to_four, reference):
    import json

    for resumed, steps in ((four_to_two, [5, 6, 7, 8]), (two_to_four, [7, 8])):
        r = verify(reference, resumed, "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        verdict = json.loads(r.stdout)
        assert [row["step"] for row in verdict["losses"]] == steps
        assert verdict["params"]["step"] == 8 and verdict["params"]["tensors"] > 10
        assert verdict["params"]["worst_rel"] <= 1e-4
    text = verify(reference, four_to_two).stdout
    assert "continues the same training" in text and "parameters at step 8" in text


@pytest.fixture(scope="module", params=["drop_optimizer_state", "drop_data_position"])
def faulty(request, reference, runtime_tmp):
    """4 -> 2 ranks again, with a callback that breaks the resume after the checkpoint is loaded."""
    run = tuner_run(runtime_tmp / f"portable-fault-{request.param}", fsdp_settings(2, 4, 1), "--resume",
                    str(reference.out / "checkpoints" / "step-4"), "--max-steps", "6", "--callback",
                    f"tests.runtime.resume_faults:{request.param}", trace=False)
    assert_ok(run)
    return request.param, run


def test_continuation_check_fails_a_resume_that_drops_optimizer_state_or_data_position(faulty, reference):
    name, run = faulty
    r = verify(reference, run)
    assert r.returncode == 1, r.stdout + r.stderr
    # without the data position step 5 already trains other samples; without Adam's moments the
    # step-5 loss (before the first update) still agrees and step 6 does not
    first = {"drop_data_position": 5, "drop_optimizer_state": 6}[name]
    assert "does NOT continue the same training" in r.stdout and f"FAIL: step {first}: loss" in r.stdout, r.stdout
    assert "Traceback" not in r.stderr


def test_inspect_names_what_the_checkpoint_holds(reference, capsys):
    """`tuner checkpoint inspect` (in this process: it reads the record and the file sizes only)."""
    import json

    from tuner.commands.cli import main

    step4 = reference.out / "checkpoints" / "step-4"
    assert main(["checkpoint", "inspect", str(step4), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["step"], info["strategy"], info["world_size"], info["state_dict"]) == (4, "fsdp2", 4, "sharded")
    assert info["data_position"] == {"epoch": 0, "micro_batches_per_rank": 4, "samples": 32}
    assert info["global_batch"]["global_batch"] == 8 and info["tokens_seen"] == 32 * 32
    assert all(info["bytes"][part] > 0 for part in ("model", "optimizer", "scheduler", "rng")), info["bytes"]
    assert info["total_bytes"] == sum(info["bytes"].values())
    assert "on 1, 2, 4, 8 ranks, keeping the global batch 8" in info["resume_into"][0]
    assert info["resume_into"][1].startswith("ddp, fsdp2 (full state dict), zero1, zero2, zero3 ")  # another backend
    assert "tuner checkpoint export" in info["export_to"][0]
    assert main(["checkpoint", "inspect", str(reference.out / "checkpoints")]) == 0  # the latest one
    text = capsys.readouterr().out
    assert "step         8 (epoch 1)" in text and "resume into:" in text
    assert main(["checkpoint", "inspect", str(reference.out / "nothing")]) == 2
    assert "checkpoint not found" in capsys.readouterr().err
