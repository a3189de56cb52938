"""Retrieval evaluation: recall@1 and MRR of queries retrieving their own positive."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def retrieval_metrics(q: torch.Tensor, p: torch.Tensor) -> dict[str, float]:
    """recall@1 and MRR of query i retrieving positive i among all positives (cosine)."""
    q = F.normalize(q.float(), dim=-1)
    p = F.normalize(p.float(), dim=-1)
    scores = q @ p.T
    own = scores.diagonal().unsqueeze(1)
    rank = (scores > own).sum(dim=1) + 1  # ties count in the query's favour
    return {"recall@1": float((rank == 1).float().mean()), "mrr": float((1.0 / rank.float()).mean())}


def retrieval_report(q: torch.Tensor, p: torch.Tensor, dims: Sequence[int] = ()) -> dict[str, float]:
    """`retrieval_metrics` at full width, and as ``<metric>@dim<d>`` per narrower Matryoshka width."""
    metrics = retrieval_metrics(q, p)
    for d in dims:
        if d < q.shape[-1]:
            for k, v in retrieval_metrics(q[:, :d], p[:, :d]).items():
                metrics[f"{k}@dim{d}"] = v
    return metrics


@torch.no_grad()
def encode(model: nn.Module, tokenizer: Any, texts: Sequence[str], seq_len: int = 128,
           batch_size: int = 32, device: torch.device | str | None = None) -> torch.Tensor:
    """Pooled embeddings (un-normalised) of texts, batch by batch, in eval mode.

    Under FSDP every rank must call this with the same texts (the forward all-gathers).
    """
    was_training = model.training
    model.eval()
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    outs = []
    for i in range(0, len(texts), batch_size):
        enc = tokenizer(list(texts[i: i + batch_size]), padding=True, truncation=True, max_length=seq_len,
                        return_tensors="pt")
        out = model(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device))
        outs.append(out.float().cpu())
    model.train(was_training)
    return torch.cat(outs, dim=0)


def evaluate_retrieval(model: nn.Module, tokenizer: Any, rows: list[dict], seq_len: int = 128,
                       dims: Sequence[int] = (), device: Any = None) -> dict[str, float]:
    """recall@1 / MRR on held-out rows at full width, and per Matryoshka width when given."""
    q = encode(model, tokenizer, [r["query"] for r in rows], seq_len, device=device)
    p = encode(model, tokenizer, [r["positive"] for r in rows], seq_len, device=device)
    return retrieval_report(q, p, dims)


def gather_heldout(model: nn.Module, batches: Any, accelerator: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(queries, positives) embeddings of the whole held-out split on every rank, as float CPU
    tensors: each rank embeds its share of `PairCollator` batches, then they are gathered."""
    from ...data_sources.pairs import batch_size_of

    qs, ps = [], []
    with torch.no_grad():
        for batch in batches:
            bsz, _ = batch_size_of(batch)
            emb = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).float()
            both = torch.cat([emb[:bsz], emb[bsz: 2 * bsz]], dim=1)
            both = accelerator.gather_for_metrics(both)
            width = both.shape[1] // 2
            qs.append(both[:, :width].cpu())
            ps.append(both[:, width:].cpu())
    return torch.cat(qs), torch.cat(ps)
