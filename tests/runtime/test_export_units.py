"""The streamed export's small parts, in-process: the --max-shard-size argument, and the guard
that lets `drop_pages` touch only tensors read from a memory-mapped file."""

from __future__ import annotations


import pytest
import torch
from tuner.runtime.export_shards import output_key
from tuner.runtime.export_sources import _file_backed

from tests import harness


@pytest.mark.parametrize("size", ["5XB", "0MB"])
def test_bad_max_shard_size_is_refused_naming_the_form(size, tmp_path):
    proc = harness.tuner('checkpoint', 'export', str(tmp_path), '--out', str(tmp_path / 'o'), '--max-shard-size', size)
    assert proc.returncode == 2
    assert "--max-shard-size" in proc.stderr and "5GB" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_only_a_file_mapping_is_file_backed(tmp_path):
    anonymous = torch.zeros(1 << 20)
    assert not _file_backed(anonymous, "optim_states.pt")
    path = tmp_path / "x_optim_states.pt"
    torch.save({"t": torch.ones(1 << 20)}, path)
    mapped = torch.load(path, mmap=True, weights_only=True)["t"]
    assert _file_backed(mapped, "optim_states.pt")
    assert not _file_backed(mapped, "other.pt")


def test_output_keys_of_a_peft_model():
    assert output_key("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight") == \
        "model.layers.0.self_attn.q_proj.weight"
    assert output_key("base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight") is None
    assert output_key("model.embed_tokens.weight") == "model.embed_tokens.weight"
