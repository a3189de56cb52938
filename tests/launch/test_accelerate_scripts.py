"""accelerate's own test scripts (accelerate/test_utils/scripts/) under `tuner launch` on 2 CPU
ranks (issue 23, item 10).

The full matrix, every CPU-capable script (test_cli, test_ops, test_script, test_sync) on the
DDP, FSDP2, ZeRO-2 and ZeRO-3 builds, is `python bench/accelerate_scripts.py` (16 launches,
~10 min on 2 cores: too slow for the suite; results and the upstream limits in
docs/benchmarks.md). The suite keeps two cases that exercise what tuner corrects, one launch
each: `test_ops.py` builds a bare `PartialState()` and no `Accelerator` (before
`cpu_shim._install_partial_state` it failed on ZeRO builds with a gloo all-gather length error,
and "passed" on DDP as two separate one-process worlds), on ZeRO-2 (the shim does not depend on
the ZeRO stage: one DeepSpeed build shows it); `test_script.py` (accelerate's broad check of an
`Accelerator`: RNG sync, data loaders, training, state) on ZeRO-3.
"""

from __future__ import annotations

import pytest

from bench.accelerate_scripts import BUILDS, compile_build, run_one

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("script,build", [("test_ops", "zero2"), ("test_script", "zero3")])
def test_accelerate_script_under_tuner_launch(tmp_path, script, build):
    assert build in BUILDS
    result = run_one(compile_build(tmp_path, build), script, tmp_path, timeout=900)
    assert result["rc"] == 0, result["tail"]
