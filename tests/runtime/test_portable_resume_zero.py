"""ZeRO at another world size (issue 33, b); the cross-backend resumes (c) are in
test_portable_resume_backends.py, which shares this module's helpers.

(b) A ZeRO-2 and a ZeRO-3 reference run on 2 ranks (global batch 8 = micro 4 x accumulation
1 x 2) save every 2 steps and go on to step 8; each is resumed from its step 4 on 4 ranks
(micro 2): `tuner run` converts the checkpoint with DeepSpeed's own ds_to_universal before any
rank starts and the engine re-partitions it on load. Losses after the resume equal the
reference's within 1e-4 (relative) and the continuation check passes them.
"""

from __future__ import annotations

import pytest
from runtime_helpers import assert_ok, merged, tuner_run
from test_portable_resume import FSDP, LOSS_RTOL, assert_same_losses, verify

pytestmark = pytest.mark.slow

BACKENDS = {"zero2": {"deepspeed": {"enabled": True, "zero_stage": 2}},
            "zero3": {"deepspeed": {"enabled": True, "zero_stage": 3}},
            "fsdp2": {"fsdp": FSDP}, "ddp": {}}


def settings(backend: str, world: int, micro: int) -> dict:
    return merged(**BACKENDS[backend], hardware={"platform": "cpu", "num_processes": world},
                  training={"micro_batch_size": micro, "max_steps": 8, "validation_every": 0,
                            "lr_scheduler": "constant"},
                  checkpoint={"every_steps": 2, "keep_last": 4, "export": False})


_REFS: dict[str, object] = {}


def reference(backend: str, root):
    """The 2-rank uninterrupted run of `backend` (one launch, shared by every test of this module)."""
    if backend not in _REFS:
        run = tuner_run(root / f"portable-ref-{backend}-w2", settings(backend, 2, 4), trace=False)
        assert_ok(run)
        _REFS[backend] = run
    return _REFS[backend]


@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_zero_resumes_at_another_world_size(stage, runtime_tmp):
    ref = reference(stage, runtime_tmp)
    resumed = tuner_run(runtime_tmp / f"portable-{stage}-2to4", settings(stage, 4, 2), "--resume",
                        str(ref.out / "checkpoints" / "step-4"), trace=False)
    assert_ok(resumed)
    assert "to DeepSpeed's universal checkpoint for 4 ranks" in resumed.output
    assert (resumed.out / "checkpoints" / "universal-step-4" / "pytorch_model" / "zero").is_dir()
    assert "(epoch 0, batch 4)" in resumed.output  # 32 samples / (2 x 4)
    assert_same_losses(resumed, ref, range(5, 9), LOSS_RTOL)
    r = verify(ref, resumed)
    assert r.returncode == 0, r.stdout + r.stderr
