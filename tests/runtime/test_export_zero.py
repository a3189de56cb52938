"""The streamed export's ZeRO-1/2 reader (runtime/export_zero.py) cuts every parameter out of
the ranks' fp32 partitions itself, so that it never holds the model twice as DeepSpeed's reader
does. Here it must give exactly what DeepSpeed's own reader gives, name by name and bit for bit,
on real two-rank checkpoints DeepSpeed writes (tests/runtime/zero_fake_ranks.py: one process,
torch's fake process group): ZeRO-2 in fp32, ZeRO-1 in bf16, ZeRO-2 with the optimizer offloaded
to the CPU in bf16; odd parameter sizes so that a rank's slice ends inside a parameter, two
parameter groups, a tied weight, a frozen layer, an integer and a float buffer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
VARIANTS = ["zero2", "zero1_bf16", "zero2_offload_bf16"]
#: deepspeed.initialize JIT-builds its ops here (the shared-memory collectives, fused Adam, CPU Adam
#: for the offloaded optimizer): not in the fast tier, which builds none
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    from tests.ops_wait import wait_for_ops

    wait_for_ops()
    out = tmp_path_factory.mktemp("zero")
    proc = subprocess.run([sys.executable, str(HERE / "zero_fake_ranks.py"), str(out), *VARIANTS],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.parametrize("variant", VARIANTS)
def test_zero12_reader_gives_deepspeeds_tensors_bit_for_bit(checkpoints, variant):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    from tuner.runtime.export_zero import Zero12Source, open_zero

    path = checkpoints / variant
    reference = get_fp32_state_dict_from_zero_checkpoint(str(path))
    source = open_zero(path)
    assert isinstance(source, Zero12Source)
    assert list(source.shapes) == list(reference)  # the same names, in DeepSpeed's order
    assert "tied.weight" in reference and "steps" in reference
    got = source.load(list(reversed(reference)))
    for name, want in reference.items():
        assert source.shapes[name] == (tuple(want.shape), want.dtype), name
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        assert got[name].contiguous().view(torch.uint8).equal(want.contiguous().view(torch.uint8)), name
    # the case the reader exists for: a rank's slice ends inside a parameter
    ends = {end for starts in source.starts for end in starts[1:-1]}
    assert any(offset < end < offset + torch.Size(shape).numel()
               for _, offset, shape in source.pieces.values() for end in ends)


def test_zero12_reader_refuses_partitions_that_do_not_fit_the_shapes():
    """The reader checks DeepSpeed's sanity rule (the parameters consume the partitions, up to
    the 2 x world alignment): a parameter group's shapes that claim more elements are refused."""
    from tuner.runtime.export_zero import Zero12Source

    source = Zero12Source.__new__(Zero12Source)
    source.starts = [[0, 42, 83]]
    with pytest.raises(ValueError, match="consumed 91 numels out of 83"):
        source._lay_out([{"w": torch.Size([91])}], None, 2)
    assert source._lay_out([{"w": torch.Size([81])}], [[2]], 2)["w"] == (0, 0, (81,))
