"""accelerate's own test scripts (accelerate/test_utils/scripts/) under `tuner launch` on 2 CPU
ranks (issue 23, item 10).

The full matrix, every CPU-capable script on the DDP, FSDP2, ZeRO-2 and ZeRO-3 builds, is
`python bench/accelerate_scripts.py` (20 launches: too slow for the suite on 2 cores; results
in docs/benchmarks.md). The suite keeps the cases that exercise what tuner corrects:
`test_ops.py` builds a bare `PartialState()` and no `Accelerator` (it failed on ZeRO builds
with a gloo all-gather length error before `cpu_shim.correct_partial_state`), on ZeRO-2 and
ZeRO-3; `test_sync.py` (an `Accelerator`, gradient accumulation and sync) on FSDP2.
"""

from __future__ import annotations

import pytest

from bench.accelerate_scripts import BUILDS, compile_build, run_one

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("script,build", [("test_ops", "zero2"), ("test_ops", "zero3"), ("test_sync", "fsdp2")])
def test_accelerate_script_under_tuner_launch(tmp_path, script, build):
    assert build in BUILDS
    result = run_one(compile_build(tmp_path, build), script, tmp_path, timeout=900)
    assert result["rc"] == 0, result["tail"]
