"""`checkpoint_io.quick_save`, what the trainer's saves run inside: torch.save writes no CRC-32
(the half of its time bench/checkpoint_speed.py measured), torch.load reads every tensor back
bit for bit all the same, and the setting is torch's own again afterwards (a save elsewhere in
the process, or after a failed one, is not changed)."""

from __future__ import annotations

import zipfile

import pytest
import torch
import torch.serialization as ts
from tuner.runtime.checkpoint_io import quick_save


def _crcs(path) -> list[int]:
    with zipfile.ZipFile(path) as z:
        return [i.CRC for i in z.infolist() if "/data/" in i.filename]


def test_a_quick_save_has_no_checksums_and_loads_bit_for_bit(tmp_path):
    state = {"exp_avg": torch.randn(4096), "step": torch.tensor(3.0), "w": torch.randn(64, 64).to(torch.bfloat16)}
    with quick_save():
        torch.save(state, tmp_path / "quick.pt")
    torch.save(state, tmp_path / "plain.pt")
    assert _crcs(tmp_path / "quick.pt") and not any(_crcs(tmp_path / "quick.pt"))
    assert all(_crcs(tmp_path / "plain.pt"))  # torch's default again after the block
    back = torch.load(tmp_path / "quick.pt", weights_only=True)
    assert back.keys() == state.keys()
    assert all(back[k].dtype == v.dtype and back[k].view(torch.uint8).equal(v.view(torch.uint8))
               if v.dim() else back[k].equal(v) for k, v in state.items())


def test_the_setting_is_restored_after_a_failed_save():
    assert ts.get_crc32_options()
    with pytest.raises(RuntimeError, match="disk gone"), quick_save():
        raise RuntimeError("disk gone")
    assert ts.get_crc32_options()
