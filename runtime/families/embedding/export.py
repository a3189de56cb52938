"""Writing a trained encoder as a folder `AutoModel.from_pretrained` and sentence-transformers load."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .model import EmbeddingModel

#: Written into exported folders so that tuner (and people) know how to embed with them.
EXPORT_META = "tuner_embedding.json"


def _unwrap_encoder(model: EmbeddingModel) -> nn.Module:
    enc = model.encoder
    if hasattr(enc, "merge_and_unload"):  # peft: fold the adapters into the base weights
        enc = enc.merge_and_unload()
    return enc


def export_embedding_model(model: EmbeddingModel, tokenizer: Any, out_dir: str | Path,
                           dims: Sequence[int] = (), state_dict: dict[str, torch.Tensor] | None = None,
                           adapter_state: dict[str, torch.Tensor] | None = None) -> Path:
    """Write a folder `AutoModel.from_pretrained` loads, plus sentence-transformers metadata.

    ``model`` is a plain (unsharded, CPU) `EmbeddingModel`; ``state_dict`` (keys as in that
    model's `state_dict()`, e.g. gathered from a sharded run) is loaded into it first. LoRA
    adapters are merged; the unmerged adapter is also saved under ``adapter/``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if state_dict is not None:
        missing, unexpected = model.load_state_dict(state_dict, strict=False)
        # Keys the training model did not hold: BERT's unused pooler (kept as loaded) and buffers.
        bad = [k for k in missing if ".pooler." not in k and not k.endswith("position_ids")]
        if unexpected or bad:
            raise RuntimeError(f"exported state does not fit the model: missing {bad[:5]}, unexpected "
                               f"{list(unexpected)[:5]}")
    if hasattr(model.encoder, "peft_config"):
        model.encoder.save_pretrained(str(out / "adapter"))
    encoder = _unwrap_encoder(model)
    encoder.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    width = int(getattr(encoder.config, "hidden_size", 0) or 0)
    meta = {"pooling": model.pooling, "normalize": True, "mrl_dims": list(dims), "dimension": width}
    (out / EXPORT_META).write_text(json.dumps(meta, indent=2) + "\n")
    # sentence-transformers layout: Transformer -> Pooling -> Normalize.
    (out / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ], indent=2) + "\n")
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": width, "pooling_mode_cls_token": model.pooling == "cls",
        "pooling_mode_mean_tokens": model.pooling == "mean", "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_lasttoken": model.pooling == "last",
    }, indent=2) + "\n")
    return out
