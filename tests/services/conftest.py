"""Fixtures for the services tests: model folders written from real configs (no weights)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

#: Small but real transformers configs, written as a checkpoint's config.json would be.
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 1000, "hidden_size": 64,
         "intermediate_size": 160, "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2,
         "tie_word_embeddings": False}
QWEN2 = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 800, "hidden_size": 64,
         "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "tie_word_embeddings": True}
GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 500, "n_embd": 48, "n_layer": 2,
        "n_head": 4, "n_positions": 64}
BERT = {"model_type": "bert", "architectures": ["BertModel"], "vocab_size": 300, "hidden_size": 32,
        "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": 64}
#: Llama-2-7B's shape (6.74B parameters): only ever built on the meta device.
LLAMA2_7B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
             "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 32, "vocab_size": 32000, "tie_word_embeddings": False}
UNET = {"_class_name": "UNet2DConditionModel", "sample_size": 8, "in_channels": 4, "out_channels": 4,
        "block_out_channels": [16, 32], "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D"],
        "up_block_types": ["CrossAttnUpBlock2D", "UpBlock2D"], "layers_per_block": 1,
        "cross_attention_dim": 16, "attention_head_dim": 4, "norm_num_groups": 8}


def write_model(root: Path, name: str, config: dict) -> Path:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return d


@pytest.fixture
def models(tmp_path) -> dict[str, Path]:
    """Model folders in a temporary directory, by name."""
    out = {name: write_model(tmp_path / "models", name, cfg)
           for name, cfg in (("llama", LLAMA), ("qwen2", QWEN2), ("gpt2", GPT2), ("bert", BERT),
                             ("llama2-7b", LLAMA2_7B), ("unet", UNET))}
    pipe = tmp_path / "models" / "pipeline"
    write_model(pipe, "unet", UNET)
    (pipe / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline",
                                                       "unet": ["diffusers", "UNet2DConditionModel"]}))
    out["pipeline"] = pipe
    return out
