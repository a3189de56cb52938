"""Embedding data: query/positive(/negatives) pairs from JSONL, split and batched."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..base import FamilyError, read_jsonl

DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "embedding"
BUILTIN_PAIRS = DATA_DIR / "pairs.jsonl"


def read_pairs(path: str | Path) -> list[dict[str, Any]]:
    """JSONL rows with ``query`` and ``positive`` (and optionally ``negatives``: list or str)."""
    rows = []
    src = BUILTIN_PAIRS if str(path) in ("", "builtin") else Path(path).expanduser()
    for lineno, row in read_jsonl(src):
        if "query" not in row or "positive" not in row:
            raise FamilyError(f"{src}:{lineno}: an embedding pair needs 'query' and 'positive'")
        neg = row.get("negatives", row.get("negative", []))
        row["negatives"] = [neg] if isinstance(neg, str) else list(neg)
        rows.append(row)
    return rows


def split_pairs(rows: list[dict], validation_split: float, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """A deterministic held-out split (the same on every rank)."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_val = int(round(len(rows) * validation_split)) if validation_split > 0 else 0
    val = [rows[i] for i in order[:n_val]]
    train = [rows[i] for i in order[n_val:]]
    return train, val


class PairDataset(torch.utils.data.Dataset):
    def __init__(self, rows: list[dict]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return self.rows[i]


@dataclass
class PairCollator:
    """Tokenises a batch as one stacked tensor: [queries; positives; negatives].

    Every row must carry the same number of hard negatives (the first row decides; extra
    ones are dropped, rows with too few are refused), so the loss can reshape them.
    """

    tokenizer: Any
    seq_len: int = 128

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        n_neg = len(rows[0]["negatives"])
        if any(len(r["negatives"]) < n_neg for r in rows):
            raise ValueError("every pair in a batch needs the same number of hard negatives")
        texts = [r["query"] for r in rows] + [r["positive"] for r in rows]
        texts += [r["negatives"][k] for r in rows for k in range(n_neg)]
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.seq_len, return_tensors="pt")
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                "num_negatives": torch.tensor(n_neg)}


def batch_size_of(batch: dict[str, torch.Tensor]) -> tuple[int, int]:
    """(pairs, hard negatives per pair) of a stacked batch from `PairCollator`."""
    n_neg = int(batch["num_negatives"])
    return int(batch["input_ids"].shape[0]) // (2 + n_neg), n_neg
