"""Diffusion data: aspect buckets, the training set (caption dropout) and loading a resized image.

Rows come from `sources` (``{"image", "caption", "label"}``; ``image`` is a file path, or an
index into a `datasets` table).
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "diffusion"


def bucket_sizes(resolution: int, multiple: int = 8) -> list[tuple[int, int]]:
    """(width, height) buckets of about resolution² pixels: portrait, square, landscape."""
    out = []
    for aspect in (4 / 3, 1.0, 3 / 4):  # height / width
        w = max(multiple, round(resolution / math.sqrt(aspect) / multiple) * multiple)
        h = max(multiple, round(resolution * math.sqrt(aspect) / multiple) * multiple)
        out.append((w, h))
    return out


def nearest_bucket(size: tuple[int, int], buckets: list[tuple[int, int]]) -> int:
    w, h = size
    return min(range(len(buckets)), key=lambda i: abs(math.log((h / w) / (buckets[i][1] / buckets[i][0]))))


class ImageDataset:
    """Images with captions; each item keeps its native size (collate buckets and resizes).

    ``table``: the `datasets` table that integer ``image`` values index (images undecoded).
    ``caption_dropout``: the probability that an item's caption is replaced by "" (the
    unconditional case classifier-free guidance needs), drawn from a generator seeded
    with ``seed``; validation sets keep every caption.
    """

    def __init__(self, rows: list[dict[str, Any]], buckets: list[tuple[int, int]], table=None,
                 caption_dropout: float = 0.0, seed: int = 0) -> None:
        self.rows = rows
        self.buckets = buckets
        self.table = table
        self.caption_dropout = float(caption_dropout)
        self._seed = seed
        self._worker: int | None = None
        self._rng = random.Random(seed)
        self.bucket_of = []
        for r in rows:
            with open_image(self.image(r)) as im:
                self.bucket_of.append(nearest_bucket(im.size, buckets))

    def image(self, row: dict[str, Any]):
        """A row's image as `open_image` takes it: a path, or the table's ``{"bytes", "path"}``."""
        src = row["image"]
        return self.table[int(src)]["image"] if isinstance(src, int) else str(src)

    def _draw(self) -> float:
        """A uniform draw; each DataLoader worker has its own generator (seeded by its id), so
        workers do not repeat each other's draws."""
        from torch.utils.data import get_worker_info

        worker = getattr(get_worker_info(), "id", None)
        if worker != self._worker:
            self._worker = worker
            self._rng = random.Random(f"{self._seed}:{worker}")
        return self._rng.random()

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        r = self.rows[i]
        caption = r["caption"]
        if self.caption_dropout and self._draw() < self.caption_dropout:
            caption = ""
        return {"image": self.image(r), "caption": caption, "label": r["label"], "bucket": self.bucket_of[i]}


def open_image(src):
    """A PIL image from a path or a `datasets` image value (``{"bytes", "path"}``)."""
    import io

    from PIL import Image

    if isinstance(src, dict):
        return Image.open(io.BytesIO(src["bytes"])) if src.get("bytes") else Image.open(src["path"])
    return Image.open(src)


def load_image(src, size: tuple[int, int]):
    """RGB tensor in [-1, 1], shape [3, h, w]: scaled to cover `size`, centre-cropped."""
    import numpy as np
    import torch
    from PIL import Image

    w, h = size
    with open_image(src) as im:
        im = im.convert("RGB")
        scale = max(w / im.width, h / im.height)
        nw, nh = max(w, round(im.width * scale)), max(h, round(im.height * scale))
        im = im.resize((nw, nh), Image.BICUBIC)
        left, top = (nw - w) // 2, (nh - h) // 2
        im = im.crop((left, top, left + w, top + h))
        arr = np.asarray(im, dtype=np.float32) / 127.5 - 1.0
    return torch.from_numpy(arr).permute(2, 0, 1).contiguous()


def split_rows(rows: list[dict[str, Any]], validation_split: float, seed: int) -> tuple[list, list]:
    """(train, validation) rows: a seeded, order-keeping hold-out of at least one image."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_val = max(1, int(len(rows) * validation_split)) if validation_split > 0 else 0
    val_rows = [rows[i] for i in sorted(order[:n_val])]
    train_rows = [rows[i] for i in sorted(order[n_val:])]
    return train_rows, val_rows


def validation_prompts(rows: list[dict[str, Any]], limit: int = 4) -> tuple[list[str], list[int]]:
    """Up to `limit` distinct captions (and their labels) to sample at validation."""
    seen, prompts, labels = set(), [], []
    for r in rows:
        if r["caption"] not in seen:
            seen.add(r["caption"])
            prompts.append(r["caption"])
            labels.append(int(r["label"]))
        if len(prompts) == limit:
            break
    return prompts, labels
