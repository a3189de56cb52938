"""The four pairs of accelerate's test scripts that fail under `tuner launch` (issue 23, item 10;
`bench/accelerate_scripts.py` UPSTREAM_LIMITS) fail for upstream's reasons, not tuner's: shown
here without tuner, accelerate's launcher or a second rank, on the same `RegressionModel` the
scripts train.

- FSDP2: torch's `fully_shard` refuses the model's scalar parameters `a` and `b` (any device).
- ZeRO-2/3: DeepSpeed's engine broadcasts every parameter as `p.data.view(torch.uint8)`
  (`DeepSpeedEngine._broadcast_model`), which a 0-d float parameter cannot be (any device).

The bench asserts that each pair fails with exactly these messages under `tuner launch`.
"""

from __future__ import annotations

import inspect

import pytest

from bench.accelerate_scripts import UPSTREAM_LIMITS
from tests.one_rank_group import one_rank_group

torch = pytest.importorskip("torch")


def _regression_model():
    from accelerate.test_utils.training import RegressionModel

    return RegressionModel()


def test_fsdp2_refuses_the_scripts_model_without_tuner(tmp_path):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    with one_rank_group(tmp_path):
        mesh = init_device_mesh("cpu", (1,))
        message = UPSTREAM_LIMITS[("test_script", "fsdp2")][0]
        assert message == UPSTREAM_LIMITS[("test_sync", "fsdp2")][0]
        with pytest.raises(ValueError, match=message):
            fully_shard(_regression_model(), mesh=mesh)


def test_deepspeed_broadcast_cannot_view_the_scripts_scalar_parameters():
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.engine import DeepSpeedEngine

    # DeepSpeed's own code: every parameter is broadcast as a uint8 view of its data.
    assert "p.data.view(torch.uint8)" in inspect.getsource(DeepSpeedEngine._broadcast_model)
    model = _regression_model()
    scalars = [name for name, p in model.named_parameters() if p.dim() == 0]
    assert scalars == ["a", "b"]
    for stage in ("zero2", "zero3"):
        with pytest.raises(RuntimeError, match=UPSTREAM_LIMITS[("test_sync", stage)][0]):
            model.a.data.view(torch.uint8)
