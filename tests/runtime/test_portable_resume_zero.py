"""ZeRO resumes at another world size through DeepSpeed's universal checkpoint (issue 33, b).

A ZeRO-2 and a ZeRO-3 reference run on 2 ranks (global batch 8 = micro 4 x accumulation 1 x 2)
save every 2 steps and go on to step 8; each is resumed from its step 4 on 4 ranks (micro 2 x
accumulation 1 x 4): `tuner run` converts the checkpoint with DeepSpeed's own ds_to_universal
before any rank starts and the engine re-partitions it on load. The losses after the resume
equal the reference's within 1e-4 (relative), and the continuation check passes them.
"""

from __future__ import annotations

import pytest
from runtime_helpers import assert_ok, merged, tuner_run
from test_portable_resume import LOSS_RTOL, assert_same_losses, verify

pytestmark = pytest.mark.slow

STAGES = {"zero2": {"enabled": True, "zero_stage": 2}, "zero3": {"enabled": True, "zero_stage": 3}}


def zero_settings(stage: str, world: int, micro: int, accum: int) -> dict:
    return merged(deepspeed=STAGES[stage], hardware={"platform": "cpu", "num_processes": world},
                  training={"micro_batch_size": micro, "gradient_accumulation_steps": accum, "max_steps": 8,
                            "validation_every": 0, "lr_scheduler": "constant"},
                  checkpoint={"every_steps": 2, "keep_last": 4, "export": False})


@pytest.fixture(scope="module", params=list(STAGES))
def zero_pair(request, runtime_tmp):
    stage = request.param
    ref = tuner_run(runtime_tmp / f"portable-ref-{stage}-w2", zero_settings(stage, 2, 4, 1), trace=False)
    assert_ok(ref)
    resumed = tuner_run(runtime_tmp / f"portable-{stage}-2to4", zero_settings(stage, 4, 2, 1), "--resume",
                        str(ref.out / "checkpoints" / "step-4"), trace=False)
    assert_ok(resumed)
    return stage, ref, resumed


def test_zero_resumes_at_another_world_size(zero_pair):
    stage, ref, resumed = zero_pair
    assert "to DeepSpeed's universal checkpoint for 4 ranks" in resumed.output
    assert (resumed.out / "checkpoints" / "universal-step-4" / "pytorch_model" / "zero").is_dir()
    assert "(epoch 0, batch 4)" in resumed.output  # 32 samples / (2 x 4)
    assert_same_losses(resumed, ref, range(5, 9), LOSS_RTOL)
    r = verify(ref, resumed)
    assert r.returncode == 0, r.stdout + r.stderr
