"""Diffusion data: image folders with captions, aspect buckets, and loading a resized image."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

from ..base import FamilyError, read_jsonl

DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "diffusion"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


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


def read_image_folder(folder: Path) -> list[dict[str, Any]]:
    """Rows ``{"path", "caption", "label"}`` from captions.jsonl, .txt side files, or none."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FamilyError(f"data.path {folder} is not an image folder")
    rows: list[dict[str, Any]] = []
    index = folder / "captions.jsonl"
    if index.is_file():
        for n, item in read_jsonl(index):
            name = item.get("file") or item.get("image") or item.get("file_name")
            if not isinstance(name, str):
                raise FamilyError(f"{index}:{n}: each line needs a 'file' naming an image")
            rows.append({"path": folder / name, "caption": str(item.get("caption", item.get("text", ""))),
                         "label": int(item.get("label", 0))})
    else:
        for p in sorted(folder.rglob("*")):
            if p.suffix.lower() in IMAGE_SUFFIXES:
                txt = p.with_suffix(".txt")
                rows.append({"path": p, "caption": txt.read_text().strip() if txt.is_file() else "", "label": 0})
    missing = [str(r["path"]) for r in rows if not Path(r["path"]).is_file()]
    if missing:
        raise FamilyError(f"{len(missing)} image(s) listed but not found, e.g. {missing[0]}")
    if not rows:
        raise FamilyError(f"no images in {folder} ({', '.join(IMAGE_SUFFIXES)})")
    return rows


class ImageDataset:
    """Images with captions; each item keeps its native size (collate buckets and resizes)."""

    def __init__(self, rows: list[dict[str, Any]], buckets: list[tuple[int, int]]) -> None:
        from PIL import Image

        self.rows = rows
        self.buckets = buckets
        self.bucket_of = []
        for r in rows:
            with Image.open(r["path"]) as im:
                self.bucket_of.append(nearest_bucket(im.size, buckets))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        r = self.rows[i]
        return {"path": str(r["path"]), "caption": r["caption"], "label": r["label"], "bucket": self.bucket_of[i]}


def load_image(path: str, size: tuple[int, int]):
    """RGB tensor in [-1, 1], shape [3, h, w]: scaled to cover `size`, centre-cropped."""
    import numpy as np
    import torch
    from PIL import Image

    w, h = size
    with Image.open(path) as im:
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
