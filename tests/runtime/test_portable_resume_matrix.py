"""Portable resume (issue 33): every strategy at another world size and across backends, on real
gloo ranks, from ONE uninterrupted run, and the continuation check that passes them and fails a
resume that loses the optimizer state, the LR schedule or the data position.

Each resume below starts from a checkpoint of the run above it and goes on to step 14, so that
run is the uninterrupted reference of the resume's steps, and the resume's own checkpoints are
the next link's source: one launch both proves a resume and writes the next one's checkpoint
(checkpoints every 2 steps; global batch 8 = micro x accumulation x ranks throughout; the packed
rows make 7 steps an epoch; a constant LR after 2 warm-up steps):

    R  ddp   2 ranks, micro 4                            steps 1-14 (the only run from scratch)
    |- s2 -> ddp 4 ranks, micro 1 x accum 2               DDP at another world size and accumulation
    |        '- s4 -> zero1 1 rank, micro 4 x accum 2     DDP -> ZeRO-1 (portable form, DeepSpeed's API)
    '- s2 -> fsdp2 full state dict, 1 rank, micro 8      DDP -> FSDP2
             '- s4 -> fsdp2 full, 2 ranks, micro 4       FSDP2 full state dicts at another world size
                      '- s6 -> zero2 + offload_optimizer cpu, 1 rank       FSDP2 -> ZeRO-2
                               |- s8 -> the same on 2 ranks                ZeRO-2 (CPU offload) at another world size
                               '- s8 -> fsdp2 sharded, 1 rank              ZeRO-2 -> FSDP2
                                        |- s10 -> fsdp2 sharded, 2 ranks   FSDP2 (DCP) 1 -> 2 ranks
                                        |         |- s12 -> fsdp2 sharded, 1 rank    FSDP2 (DCP) 2 -> 1 rank
                                        |         '- s12 -> the same, broken on purpose (3 runs, below)
                                        '- s10 -> zero3, 2 ranks           FSDP2 (sharded, DCP) -> ZeRO-3
                                                  '- s12 -> zero3, 1 rank  ZeRO-3 at another world size

World sizes 1 <-> 2 (not 2 <-> 4): the resharding a world change asks for is the same code at
any pair of sizes: DCP's load plans every saved shard onto the new mesh (an FSDP2 run on 1 rank
is a 1-rank DeviceMesh, its state dicts DTensors with one shard: it reads the two shards of a
2-rank checkpoint and writes one that 2 ranks split again), DeepSpeed's `ds_to_universal` merges
the ranks' partitions into one tensor per parameter and `load_universal` partitions them again
for whatever world loads them, and the data position is re-cut by `resume_rules.batches_to_skip`
from samples, whatever the sizes. Both directions are kept for FSDP2 sharded (the issue's (a)),
and each ZeRO stage under test changes its world once (ZeRO-2 grows, ZeRO-3 shrinks). DDP keeps
2 -> 4: a DDP run on 1 rank is tuner's `single` strategy, which resumes only at its own size.

Losses after a resume equal the reference's within `SAME_RTOL` when only the world size or
the state dict kind changed (fp32: only the order of the reductions differs) and across
backends (`CROSS_RTOL`: DeepSpeed's and torch's Adam round differently, by 2e-6 at most here), and `tuner
checkpoint verify` passes each pair, parameters included. The accumulation change (DDP 2 ranks x
micro 4 -> 4 ranks x micro 1 x accumulation 2) cannot be that close: tuner's causal LM loss
weighs tokens per micro-step (docs/runtime.md), so the same samples split into two micro-steps
train slightly differently: measured 2e-5 and 4e-6 at the two steps after the resume, growing to
8e-4 by step 10, and parameters up to 3.7e-2 of a tensor's largest value (Adam's first steps move
each weight by about the LR whatever its gradient's size, so a near-zero gradient whose sign the
weighting flips moves a weight the other way). Its check: the two steps after the resume within
`SAME_RTOL`, the later ones within `ACCUM_RTOL`, parameters not compared. The ZeRO-1 run after
it keeps accumulation 2. 12 launches for the matrix and 3 for the broken resumes, one
module-scoped cache; `tuner checkpoint verify` and `inspect` run in this process.
"""

from __future__ import annotations

import json

import pytest
from runtime_helpers import SEQ, assert_ok, merged, tuner_run
from tuner.runtime import continuation

pytestmark = pytest.mark.slow

#: Same backend, another world size / accumulation / state dict kind (relative).
SAME_RTOL = 1e-4
#: Another backend (relative): the issue asks for 1e-3; measured at most 2e-6 (losses) and 7e-7
#: (parameters), so the check holds them to the same bound, which a resume that loses Adam's
#: moments does not meet.
CROSS_RTOL = 1e-4
#: Another accumulation, after the first two steps (measured 8e-4 at most; see above).
ACCUM_RTOL = 2e-3
STEPS = 14

FSDP = {"enabled": True, "version": 2, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}

BACKENDS = {
    "ddp": {},
    "fsdp2": {"fsdp": FSDP},
    "fsdp2-full": {"fsdp": FSDP, "checkpoint": {"state_dict_type": "full"}},
    "zero1": {"deepspeed": {"enabled": True, "zero_stage": 1}},
    "zero2-offload": {"deepspeed": {"enabled": True, "zero_stage": 2, "offload_optimizer": "cpu"}},
    "zero3": {"deepspeed": {"enabled": True, "zero_stage": 3}},
}

#: name: (backend, ranks, micro, accumulation, (source run, checkpoint step) or None)
RUNS = {
    "R": ("ddp", 2, 4, 1, None),
    "ddp-w4-accum2": ("ddp", 4, 1, 2, ("R", 2)),
    "zero1-w1": ("zero1", 1, 4, 2, ("ddp-w4-accum2", 4)),
    "fsdp2-full-w1": ("fsdp2-full", 1, 8, 1, ("R", 2)),
    "fsdp2-full-w2": ("fsdp2-full", 2, 4, 1, ("fsdp2-full-w1", 4)),
    "zero2-offload-w1": ("zero2-offload", 1, 8, 1, ("fsdp2-full-w2", 6)),
    "zero2-offload-w2": ("zero2-offload", 2, 4, 1, ("zero2-offload-w1", 8)),
    "fsdp2-w1": ("fsdp2", 1, 8, 1, ("zero2-offload-w1", 8)),
    "fsdp2-w2": ("fsdp2", 2, 4, 1, ("fsdp2-w1", 10)),
    "fsdp2-w1-again": ("fsdp2", 1, 8, 1, ("fsdp2-w2", 12)),
    "zero3-w2": ("zero3", 2, 4, 1, ("fsdp2-w1", 10)),
    "zero3-w1": ("zero3", 1, 8, 1, ("zero3-w2", 12)),
}

#: The broken resumes (tests/runtime/resume_faults.py): "fsdp2-w1-again" with a callback that
#: breaks the resume after the checkpoint is loaded; the first step each must fail at.
FAULTS = {"drop_data_position": 13, "drop_optimizer_state": 14, "drop_schedule": 14}


def settings(backend: str, world: int, micro: int, accum: int) -> dict:
    extra = {k: dict(v) for k, v in BACKENDS[backend].items()}
    ck = {"every_steps": 2, "keep_last": 7, "export": False, **extra.pop("checkpoint", {})}
    return merged(**extra, hardware={"platform": "cpu", "num_processes": world},
                  training={"micro_batch_size": micro, "gradient_accumulation_steps": accum, "max_steps": STEPS,
                            "validation_every": 0, "lr_scheduler": "constant"},
                  checkpoint=ck)


def source_checkpoint(matrix, name: str):
    source, step = RUNS[name][4]
    return matrix(source).out / "checkpoints" / f"step-{step}"


class Matrix:
    """Launches each run of `RUNS` (and of `FAULTS`, as "fault:NAME") once, on first use (its source first)."""

    def __init__(self, root):
        self.root, self.runs = root, {}

    def __call__(self, name: str):
        if name not in self.runs:
            fault = name.removeprefix("fault:") if name.startswith("fault:") else None
            backend, world, micro, accum, source = RUNS["fsdp2-w1-again" if fault else name]
            args: list[str] = []
            if source:
                args = ["--resume", str(source_checkpoint(self, "fsdp2-w1-again" if fault else name))]
            if fault:
                args += ["--callback", f"tests.runtime.resume_faults:{fault}"]
            run = tuner_run(self.root / f"matrix-{name.replace(':', '-')}", settings(backend, world, micro, accum),
                            *args, trace=False)
            self.runs[name] = run  # a failed run fails every test that needs it, launched once
        assert_ok(self.runs[name])
        return self.runs[name]


@pytest.fixture(scope="module")
def matrix(runtime_tmp):
    return Matrix(runtime_tmp)


def assert_same_losses(resumed, reference, steps, rtol):
    got, want = resumed.losses(), reference.losses()
    assert sorted(got) == list(steps), got
    for step in steps:
        assert abs(got[step] - want[step]) <= rtol * abs(want[step]), (step, got, want)


def check_resume(matrix, name: str, rtol: float):
    """`name` continues its source run: the losses of every step after the resume, and the
    continuation check (losses and the parameters of the last checkpoint)."""
    run, (source, step) = matrix(name), RUNS[name][4]
    reference = matrix(source)
    assert f"at step {step} (epoch" in run.output, run.output[-3000:]
    assert_same_losses(run, reference, range(step + 1, STEPS + 1), rtol)
    verdict = continuation.verify(reference.out, run.out, rtol, rtol)  # `tuner checkpoint verify`, in process
    assert verdict.ok and verdict.params["step"] == STEPS, continuation.report_text(verdict, rtol, rtol)
    return run


def test_resume_with_another_accumulation_trains_the_same_samples(matrix):
    """DDP 2 ranks x micro 4 -> 4 ranks x micro 1 x accumulation 2, from step 2."""
    run, reference = matrix("ddp-w4-accum2"), matrix("R")
    got, want = run.losses(), reference.losses()
    for step in (3, 4):
        assert abs(got[step] - want[step]) <= SAME_RTOL * want[step], (step, got[step], want[step])
    assert_same_losses(run, reference, range(3, STEPS + 1), ACCUM_RTOL)
    assert "global batch kept: 8 (micro_batch_size 4 x gradient_accumulation_steps 1 x 2 ranks) -> 8 " \
           "(micro_batch_size 1 x gradient_accumulation_steps 2 x 4 ranks)" in run.output
    assert "at step 2 (epoch 0, batch 4)" in run.output  # 16 samples = 4 micro-batches of 1 on 4 ranks


@pytest.mark.parametrize("name", ["fsdp2-w2", "fsdp2-w1-again", "fsdp2-full-w2", "zero2-offload-w2", "zero3-w1"])
def test_resume_at_another_world_size_continues_the_same_training(matrix, name):
    run = check_resume(matrix, name, SAME_RTOL)
    _, world, micro, _, (source, step) = RUNS[name]
    then = RUNS[source]
    assert (f"global batch kept: 8 (micro_batch_size {then[2]} x gradient_accumulation_steps 1 x {then[1]} ranks) "
            f"-> 8 (micro_batch_size {micro} x gradient_accumulation_steps 1 x {world} ranks)") in run.output
    assert "carried" not in run.output  # the strategy's own loader
    if name.startswith("zero"):
        assert f"to DeepSpeed's universal checkpoint for {world} ranks" in run.output
        assert (run.out / "checkpoints" / f"universal-step-{step}" / "pytorch_model" / "zero").is_dir()
    if name.startswith("fsdp2-full"):  # a full state dict, written and read
        assert (run.out / "checkpoints" / "step-8" / "pytorch_model_fsdp.bin").is_file()
    if name.startswith("fsdp2-w"):  # DCP's sharded files, written and read; the position carried in samples
        saved = json.loads((source_checkpoint(matrix, name) / "tuner_checkpoint.json").read_text())
        samples = saved["batches_in_epoch"] * then[2] * then[1]
        assert f"at step {step} (epoch {saved['epoch']}, batch {samples // (micro * world)})" in run.output
        assert (run.out / "checkpoints" / f"step-{STEPS}" / "pytorch_model_fsdp_0").is_dir()


@pytest.mark.parametrize("name", ["zero1-w1", "fsdp2-full-w1", "zero2-offload-w1", "fsdp2-w1", "zero3-w2"])
def test_resume_under_another_backend_carries_the_optimizer_state(matrix, name):
    run = check_resume(matrix, name, CROSS_RTOL)
    source, target = RUNS[RUNS[name][4][0]][0].split("-")[0], RUNS[name][0].split("-")[0]
    assert f"carried {source}" in run.output and f"-> {target}" in run.output


def test_continuation_check_passes_the_world_size_changes_from_the_command_line(matrix, capsys):
    """`tuner checkpoint verify` as a person runs it (in this process: it reads files only)."""
    from tuner.commands.cli import main

    reference = matrix("fsdp2-w2")
    for name, steps in (("fsdp2-w1-again", [13, 14]), ("zero3-w1", [13, 14])):
        assert main(["checkpoint", "verify", str(matrix(RUNS[name][4][0]).out), str(matrix(name).out),
                     "--json"]) == 0
        verdict = json.loads(capsys.readouterr().out)
        assert [row["step"] for row in verdict["losses"]] == steps
        assert verdict["params"]["step"] == STEPS and verdict["params"]["tensors"] > 10
        assert verdict["params"]["worst_rel"] <= 1e-4
    assert main(["checkpoint", "verify", str(reference.out), str(matrix("fsdp2-w1-again").out)]) == 0
    text = capsys.readouterr().out
    assert "continues the same training" in text and f"parameters at step {STEPS}" in text


@pytest.mark.parametrize("fault", list(FAULTS))
def test_continuation_check_fails_a_resume_that_drops_optimizer_state_schedule_or_data_position(
        matrix, fault, capsys):
    """The same FSDP2 2 -> 1 rank resume as "fsdp2-w1-again", broken after the checkpoint is
    loaded: without the data position step 13 already trains other samples; without Adam's
    moments, or with the LR schedule started over (its warm-up: LR 0 at the first update), the
    step-13 loss (before the first update) still agrees and step 14 does not."""
    from tuner.commands.cli import main

    run = matrix(f"fault:{fault}")
    assert "global batch kept: 8" in run.output and "at step 12 (epoch 1" in run.output
    assert main(["checkpoint", "verify", str(matrix("fsdp2-w2").out), str(run.out)]) == 1
    out, err = capsys.readouterr()
    assert "does NOT continue the same training" in out and f"FAIL: step {FAULTS[fault]}: loss" in out, out
    assert "Traceback" not in err


def test_inspect_names_what_the_checkpoint_holds(matrix, capsys):
    """`tuner checkpoint inspect` (in this process: it reads the record and the file sizes only)
    of a sharded FSDP2 checkpoint written after three resumes (its position and tokens carried)."""
    from tuner.commands.cli import main

    out = matrix("fsdp2-w2").out
    assert main(["checkpoint", "inspect", str(out / "checkpoints" / "step-12"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["step"], info["strategy"], info["world_size"], info["state_dict"]) == (12, "fsdp2", 2, "sharded")
    # epoch 0 is 7 global batches of the packed rows, so step 12 is 5 batches of 8 into epoch 1
    assert info["data_position"] == {"epoch": 1, "micro_batches_per_rank": 5, "samples": 40}
    assert info["global_batch"]["global_batch"] == 8 and info["tokens_seen"] == 12 * 8 * SEQ
    assert all(info["bytes"][part] > 0 for part in ("model", "optimizer", "scheduler", "rng")), info["bytes"]
    assert info["total_bytes"] == sum(info["bytes"].values())
    assert "on 1, 2, 4, 8 ranks, keeping the global batch 8" in info["resume_into"][0]
    assert info["resume_into"][1].startswith("ddp, fsdp2 (full state dict), zero1, zero2, zero3 ")  # another backend
    assert "tuner checkpoint export" in info["export_to"][0]
    assert main(["checkpoint", "inspect", str(out / "checkpoints")]) == 0  # the latest one
    text = capsys.readouterr().out
    assert f"step         {STEPS} (epoch 1)" in text and "resume into:" in text
    assert main(["checkpoint", "inspect", str(out / "nothing")]) == 2
    assert "checkpoint not found" in capsys.readouterr().err
