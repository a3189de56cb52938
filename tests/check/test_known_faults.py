"""The compile-time silent faults (compiler/review/known_faults.py), in process: each is named
by the compiler with its cause, the key to change and the thread it comes from; a warning
reaches `tuner check` through the manifest (`known-faults`, exit 1), an error stops the
compile (exit 1, `tuner check SETTINGS.toml` compiles first). The same settings without the
fault compile without it."""

from __future__ import annotations

import dataclasses
import json

from check_helpers import check, write_settings
from tuner.compiler.compile import compile_inputs
from tuner.compiler.gather import gather
from tuner.compiler.read.source import parse_settings_text
from tuner.compiler.review.known_faults import KNOWN

from tests.runtime.runtime_helpers import to_toml

FSDP2 = {"fsdp": {"enabled": True, "version": 2, "auto_wrap_policy": "none"}}
LORA = {"model": {"type": "lora"}}
GPU2 = {"hardware": {"platform": "cuda", "num_processes": 2, "gpu_memory_gib": 80}}
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 512, "hidden_size": 32,
         "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
         "max_position_embeddings": 64}


def _merge(*sections: dict) -> dict:
    out: dict = {}
    for sec in sections:
        for name, values in sec.items():
            out.setdefault(name, {}).update(values)
    return out


def _compile(*sections: dict, versions: dict | None = None, path=None):
    src = parse_settings_text(to_toml(_merge(*sections)), path)
    inputs = gather(src, host_facts=False)
    if versions:
        inputs = dataclasses.replace(inputs, versions={**inputs.versions, **versions})
    return compile_inputs(inputs)


def _known(result) -> dict[str, str]:
    return {d.key: d.message + " | fix: " + d.fix for d in result.diagnostics.items if d.message.startswith(KNOWN)}


def test_accelerate_version_that_drops_fsdp2_lora_adapter_shards():
    """accelerate 1.7-1.14 save only rank 0's slice of each adapter under FSDP2 with a full
    state dict (huggingface/accelerate#4206, 2026-09; fixed in 1.15)."""
    full = {"checkpoint": {"state_dict_type": "full"}}
    got = _known(_compile(GPU2, FSDP2, LORA, full, versions={"accelerate": "1.14.0"}))
    msg = got["checkpoint.state_dict_type"]
    assert "accelerate 1.14.0" in msg and "rank 0's slice" in msg and "accelerate#4206" in msg and "1.15" in msg
    for fine in (_compile(GPU2, FSDP2, LORA, full, versions={"accelerate": "1.15.0"}),
                 _compile(GPU2, FSDP2, LORA, versions={"accelerate": "1.14.0"}),  # sharded saves: not affected
                 _compile(GPU2, FSDP2, full, versions={"accelerate": "1.14.0"})):  # no LoRA
        assert "checkpoint.state_dict_type" not in _known(fine)


def test_lora_under_fsdp2_on_a_model_that_fits_ddp(tmp_path):
    """A tiny model's LoRA on 80 GiB GPUs under FSDP2: DDP fits, FSDP2 is several times slower
    (pytorch/torchtitan#3035, 2026-04). `tuner check` names the warning from the manifest."""
    got = _known(_compile(GPU2, FSDP2, LORA))
    assert "fsdp.enabled" in got and "fits each GPU whole under DDP" in got["fsdp.enabled"]
    assert "torchtitan#3035" in got["fsdp.enabled"] and "fsdp.enabled = false" in got["fsdp.enabled"]
    assert "fsdp.enabled" not in _known(_compile(GPU2, FSDP2))  # full fine-tuning: FSDP2 is the point
    assert "fsdp.enabled" not in _known(_compile(GPU2, LORA))  # DDP already
    # Through tuner check: the compile's warning is a fault of the launch part (exit 1).
    (tmp_path / "train.py").write_text("print('train')\n")
    settings = write_settings(tmp_path, GPU2, FSDP2, LORA)
    rc, report, err = check("--launch-only", "--skip", "gpus", str(settings), "train.py", cwd=tmp_path)
    assert rc == 1, (report, err)
    found = [f for f in report["faults"] if f["check"] == "known-faults"]
    assert found and "[fsdp.enabled]" in found[0]["saw"] and "fsdp.enabled = false" in found[0]["fix"], found


def test_fsdp2_cpu_offload_with_an_optimizer_stepping_in_gradient_hooks():
    """Optimizer in backward + FSDP2 CPU offload: NaN loss from step 2 (torchtune#2825, 2025-06)."""
    offload = {"fsdp": {"offload_params": True}}
    in_bwd = {"training": {"optimizer_in_backward": True}}
    r = _compile(GPU2, FSDP2, offload, in_bwd)
    assert not r.ok
    msg = _known(r)["training.optimizer_in_backward"]
    assert "NaN" in msg and "torchtune#2825" in msg and "optimizer_in_backward = false" in msg
    assert "training.optimizer_in_backward" not in _known(_compile(GPU2, FSDP2, in_bwd))
    assert "training.optimizer_in_backward" not in _known(_compile(GPU2, FSDP2, offload))
    # torchtune's spelling of the key
    assert not _compile(GPU2, FSDP2, offload, {"training": {"optimizer_in_bwd": True}}).ok


def test_4bit_storage_dtype_differs_from_the_compute_dtype(tmp_path):
    """QLoRA under FSDP stores the 4-bit base as bfloat16; fp16 or fp32 compute disagrees
    (bitsandbytes' FSDP-QLoRA guide; MakazhanAlpamys/Soup#350, 2026-08)."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(LLAMA))
    qlora = {"model": {"type": "lora", "path": "model", "base_precision": "nf4-bnb"}}
    path = tmp_path / "settings.toml"
    r = _compile(GPU2, FSDP2, qlora, {"training": {"mixed_precision": "fp16"}}, path=path)
    assert not r.ok
    msg = _known(r)["training.mixed_precision"]
    assert "stored as bfloat16" in msg and "float16" in msg and "Soup#350" in msg and 'mixed_precision = "bf16"' in msg
    assert "training.mixed_precision" not in _known(_compile(GPU2, FSDP2, qlora, {"training": {"mixed_precision":
                                                                                               "bf16"}}, path=path))
