"""Embedding data: query/positive(/negatives) pairs from any local source, split and batched
(the embedding family maps them to its examples and its loss reads `batch_size_of`)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..families.base import FamilyError

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "embedding"
BUILTIN_PAIRS = DATA_DIR / "pairs.jsonl"


def read_pairs(path: str | Path, data: Any = None) -> list[dict[str, Any]]:
    """Pairs (or triplets) from any local source `datasets` reads (runtime/data_sources/):
    a query column (``query`` or sentence-transformers' ``anchor``, or ``data.anchor_column``),
    ``positive`` (``data.positive_column``), and optional hard negatives: a string or a list
    of strings in ``negatives`` / ``negative`` (``data.negative_column``), or
    sentence-transformers' ``negative_1``, ``negative_2``... columns."""
    from .source import open_dataset, resolve

    src = resolve([str(BUILTIN_PAIRS if str(path) in ("", "builtin") else Path(path).expanduser())], Path.cwd())
    ds = open_dataset(src, split=getattr(data, "split", "train") if src.folder is not None else "train")
    cols = list(ds.column_names)
    q_col = _column(cols, getattr(data, "anchor_column", ""), ("query", "anchor"))
    p_col = _column(cols, getattr(data, "positive_column", "") or "positive", ())
    n_cols = [c for c in [_column(cols, getattr(data, "negative_column", ""), ("negatives", "negative"))] if c]
    n_cols += sorted((c for c in cols if c.startswith("negative_") and c[9:].isdigit()), key=lambda c: int(c[9:]))
    if not q_col or not p_col:
        raise FamilyError(f"{src.where(0)}: an embedding pair needs 'query' (or 'anchor') and 'positive'; the data has "
                          f"{', '.join(map(repr, cols))}; name them with data.anchor_column / data.positive_column")
    rows = []
    for i, row in enumerate(ds):
        where = src.where(i)
        for c in (q_col, p_col):
            if not isinstance(row[c], str):
                raise FamilyError(f"{where}: column {c!r} is {type(row[c]).__name__}, not a string; give it as text")
        negs: list[str] = []
        for c in n_cols:
            v = row[c]
            v = [] if v is None else [v] if isinstance(v, str) else v
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise FamilyError(f"{where}: column {c!r} must be a string or a list of strings (hard negatives)")
            negs += v
        rows.append({"query": row[q_col], "positive": row[p_col], "negatives": negs})
    return rows


def _column(cols: list[str], stated: str, accepted: tuple[str, ...]) -> str:
    if stated:
        return stated if stated in cols else ""
    return next((c for c in accepted if c in cols), "")


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


def pair_sets(settings_data: Any, base_dir: Path, seed: int) -> tuple[PairDataset, PairDataset | None]:
    """(train, validation) pairs of ``data.path``: ``data.validation_path``, or the seeded
    ``data.validation_split`` hold-out (the same on every rank)."""
    d = settings_data

    def at(path: str) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else base_dir / p

    try:
        rows = read_pairs("builtin" if d.path == "builtin" else at(d.path), d)
        if d.validation_path:
            train, val = rows, read_pairs(at(d.validation_path), d)
        else:
            train, val = split_pairs(rows, d.validation_split, seed=seed)
    except (OSError, ValueError) as exc:
        raise FamilyError(f"embedding data: {exc}") from None
    return PairDataset(train), (PairDataset(val) if val else None)
