"""The resume matrix (issue 33): every strategy at another world size and across backends, on
real gloo ranks, from ONE uninterrupted run.

Each resume below starts from a checkpoint of the run above it and goes on to step 12, so that
run is the uninterrupted reference of the resume's steps, and the resume's own checkpoints are
the next link's source (checkpoints every 2 steps; global batch 8 = micro x accumulation x
ranks throughout; 64 rows, 8 steps an epoch):

    R  ddp   2 ranks, micro 4                            steps 1-14 (the only run from scratch)
    |- s2 -> ddp 4 ranks, micro 1 x accum 2               DDP at another world size and accumulation
    |        '- s4 -> zero1 2 ranks, micro 2 x accum 2    DDP -> ZeRO-1 (portable form, DeepSpeed's API)
    |                 '- s6 -> zero1 4 ranks, micro 1 x accum 2  ZeRO-1 at another world size (universal)
    '- s2 -> fsdp2 full state dict, 4 ranks, micro 2     DDP -> FSDP2
             '- s4 -> fsdp2 full, 2 ranks, micro 4       FSDP2 full state dicts at another world size
                      '- s6 -> zero2 + offload_optimizer cpu, 2 ranks      FSDP2 -> ZeRO-2
                               |- s8 -> the same on 4 ranks                ZeRO-2 (CPU offload) at another world size
                               '- s8 -> fsdp2 sharded, 2 ranks             ZeRO-2 -> FSDP2
                                        '- s10 -> zero3, 2 ranks           FSDP2 (sharded, DCP) -> ZeRO-3
                                                  '- s12 -> zero3, 4 ranks ZeRO-3 at another world size

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
`SAME_RTOL`, the later ones within `ACCUM_RTOL`, parameters not compared. The ZeRO-1 runs after
it keep accumulation 2. 11 launches in all, one module-scoped cache.
"""

from __future__ import annotations

import pytest
from runtime_helpers import assert_ok, merged, tuner_run
from test_portable_resume import FSDP, assert_same_losses
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
    "zero1-w2": ("zero1", 2, 2, 2, ("ddp-w4-accum2", 4)),
    "zero1-w4": ("zero1", 4, 1, 2, ("zero1-w2", 6)),
    "fsdp2-full-w4": ("fsdp2-full", 4, 2, 1, ("R", 2)),
    "fsdp2-full-w2": ("fsdp2-full", 2, 4, 1, ("fsdp2-full-w4", 4)),
    "zero2-offload-w2": ("zero2-offload", 2, 4, 1, ("fsdp2-full-w2", 6)),
    "zero2-offload-w4": ("zero2-offload", 4, 2, 1, ("zero2-offload-w2", 8)),
    "fsdp2-w2": ("fsdp2", 2, 4, 1, ("zero2-offload-w2", 8)),
    "zero3-w2": ("zero3", 2, 4, 1, ("fsdp2-w2", 10)),
    "zero3-w4": ("zero3", 4, 2, 1, ("zero3-w2", 12)),
}


def settings(backend: str, world: int, micro: int, accum: int) -> dict:
    extra = {k: dict(v) for k, v in BACKENDS[backend].items()}
    ck = {"every_steps": 2, "keep_last": 7, "export": False, **extra.pop("checkpoint", {})}
    return merged(**extra, hardware={"platform": "cpu", "num_processes": world},
                  training={"micro_batch_size": micro, "gradient_accumulation_steps": accum, "max_steps": STEPS,
                            "validation_every": 0, "lr_scheduler": "constant"},
                  checkpoint=ck)


class Matrix:
    """Launches each run of `RUNS` once, on first use (its source first)."""

    def __init__(self, root):
        self.root, self.runs = root, {}

    def __call__(self, name: str):
        if name not in self.runs:
            backend, world, micro, accum, source = RUNS[name]
            args: list[str] = []
            if source:
                args = ["--resume", str(self(source[0]).out / "checkpoints" / f"step-{source[1]}")]
            run = tuner_run(self.root / f"matrix-{name}", settings(backend, world, micro, accum), *args, trace=False)
            assert_ok(run)
            self.runs[name] = run
        return self.runs[name]


@pytest.fixture(scope="module")
def matrix(runtime_tmp):
    return Matrix(runtime_tmp)


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


@pytest.mark.parametrize("name", ["fsdp2-full-w2", "zero1-w4", "zero2-offload-w4", "zero3-w4"])
def test_resume_at_another_world_size_continues_the_same_training(matrix, name):
    run = check_resume(matrix, name, SAME_RTOL)
    assert "global batch kept: 8" in run.output and "carried" not in run.output  # the strategy's own loader
    if name.startswith("zero"):
        step = RUNS[name][4][1]
        assert "to DeepSpeed's universal checkpoint for 4 ranks" in run.output
        assert (run.out / "checkpoints" / f"universal-step-{step}" / "pytorch_model" / "zero").is_dir()
    if name.startswith("fsdp2-full"):  # a full state dict, written and read
        assert (run.out / "checkpoints" / "step-8" / "pytorch_model_fsdp.bin").is_file()


@pytest.mark.parametrize("name", ["zero1-w2", "fsdp2-full-w4", "zero2-offload-w2", "fsdp2-w2", "zero3-w2"])
def test_resume_under_another_backend_carries_the_optimizer_state(matrix, name):
    run = check_resume(matrix, name, CROSS_RTOL)
    source, target = RUNS[RUNS[name][4][0]][0].split("-")[0], RUNS[name][0].split("-")[0]
    assert f"carried {source}" in run.output and f"-> {target}" in run.output
