"""Resumes across backends (issue 33, c): the ZeRO-2 reference's step 4 resumed under FSDP2, a
DDP reference's under FSDP2, and an FSDP2 reference's under ZeRO-3 (2 ranks each, global batch
8): the state is carried by parameter name (runtime/portable_state.py; DeepSpeed's universal
conversion reads the ZeRO side, DeepSpeed's safe_set_full_* API loads ZeRO-3). Losses after the
resume equal the uninterrupted run's within 1e-3 (relative) and the continuation check passes.
(A file of its own, beside test_portable_resume_zero.py, so the two run in parallel.)
"""

from __future__ import annotations

import pytest
from runtime_helpers import assert_ok, tuner_run
from test_portable_resume import assert_same_losses, verify
from test_portable_resume_zero import reference, settings

pytestmark = pytest.mark.slow

#: Losses after a resume under another backend vs the uninterrupted run (relative).
CROSS_RTOL = 1e-3


@pytest.mark.parametrize("source,target", [("zero2", "fsdp2"), ("ddp", "fsdp2"), ("fsdp2", "zero3")])
def test_resume_under_another_backend(source, target, runtime_tmp):
    ref = reference(source, runtime_tmp)
    resumed = tuner_run(runtime_tmp / f"portable-{source}-to-{target}", settings(target, 2, 4), "--resume",
                        str(ref.out / "checkpoints" / "step-4"), trace=False)
    assert_ok(resumed)
    assert f"carried {source}" in resumed.output and f"-> {target}" in resumed.output
    assert_same_losses(resumed, ref, range(5, 9), CROSS_RTOL)
    r = verify(ref, resumed, "--loss-rtol", str(CROSS_RTOL), "--param-rtol", str(CROSS_RTOL))
    assert r.returncode == 0, r.stdout + r.stderr
