"""Diffusion data: aspect buckets derived from the images, the training set (caption dropout,
cached latents and embeddings) and loading a resized image.

Rows come from `images` (``{"image", "caption", "label"}``; ``image`` is a file path, or an
index into a `datasets` table).

Buckets (SimpleTuner's "area" resolution type): an image of aspect ``w/h`` trains at the size
of about ``data.resolution²`` pixels with that aspect, each side rounded to the model's
multiple (`bucket_for`); the buckets of a data set are the distinct sizes its images give.
"""

from __future__ import annotations

import hashlib
import math
import random
from pathlib import Path
from typing import Any

from .errors import DataError

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "diffusion"


def bucket_for(size: tuple[int, int], resolution: int, multiple: int = 8) -> tuple[int, int]:
    """(width, height) of about ``resolution²`` pixels at the aspect of `size`, each a multiple
    of `multiple` (at least one multiple)."""
    w, h = size
    aspect = w / h
    area = float(resolution) ** 2
    bw = max(multiple, round(math.sqrt(area * aspect) / multiple) * multiple)
    bh = max(multiple, round(math.sqrt(area / aspect) / multiple) * multiple)
    return int(bw), int(bh)


def bucket_sizes(resolution: int, multiple: int = 8) -> list[tuple[int, int]]:
    """The buckets of portrait (3:4), square and landscape (4:3) images at `resolution`."""
    return sorted({bucket_for(s, resolution, multiple) for s in ((3, 4), (1, 1), (4, 3))})


def image_digest(src) -> str:
    """sha256 of an image's bytes (a path, or a `datasets` ``{"bytes", "path"}`` value)."""
    if isinstance(src, dict):
        data = src.get("bytes") or Path(src["path"]).read_bytes()
    else:
        data = Path(src).read_bytes()
    return hashlib.sha256(data).hexdigest()


class ImageDataset:
    """Images with captions, each at its own bucket (``buckets[bucket_of[i]]``).

    ``table``: the `datasets` table that integer ``image`` values index (images undecoded).
    ``caption_dropout``: the probability that an item's caption is replaced by "" (the
    unconditional case classifier-free guidance needs), drawn from a generator seeded
    with ``seed``; validation sets keep every caption. With ``cache`` set (`attach_cache`),
    items are the cached latents and text embeddings instead of the image and caption.
    """

    def __init__(self, rows: list[dict[str, Any]], resolution: int, multiple: int, table=None,
                 caption_dropout: float = 0.0, seed: int = 0, square: bool = False) -> None:
        self.rows = rows
        self.table = table
        self.caption_dropout = float(caption_dropout)
        self._seed = seed
        self._worker: int | None = None
        self._rng = random.Random(seed)
        self.cache: Any = None
        self.latent_keys: list[str] = []
        self.text_keys: list[str] = []
        self.uncond_key = ""
        sizes = []
        for r in rows:
            with open_image(self.image(r)) as im:
                sizes.append((resolution, resolution) if square else bucket_for(im.size, resolution, multiple))
        self.buckets: list[tuple[int, int]] = sorted(set(sizes))
        self.bucket_of = [self.buckets.index(s) for s in sizes]

    def size_of(self, i: int) -> tuple[int, int]:
        return self.buckets[self.bucket_of[i]]

    def attach_cache(self, cache, latent_keys: list[str], text_keys: list[str], uncond_key: str) -> None:
        """Serve items from `cache` (`cache.LatentCache`): one latent key per row, one text
        key per row (empty lists when there is no text side), the "" caption's key."""
        self.cache, self.latent_keys, self.text_keys, self.uncond_key = cache, latent_keys, text_keys, uncond_key

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
        dropped = bool(self.caption_dropout) and self._draw() < self.caption_dropout
        item: dict[str, Any] = {"label": r["label"], "bucket": self.bucket_of[i], "size": self.size_of(i)}
        if self.cache is None:
            item.update(image=self.image(r), caption="" if dropped else r["caption"])
            return item
        item.update(self.cache.load("latent", self.latent_keys[i]))  # latents (and SDXL's time ids)
        if self.text_keys:
            item.update(self.cache.load("text", self.uncond_key if dropped else self.text_keys[i]))
        return item


def open_image(src):
    """A PIL image from a path or a `datasets` image value (``{"bytes", "path"}``); a file Pillow
    cannot read is a `DataError` naming it (exit 2, no traceback)."""
    import io

    from PIL import Image

    try:
        if isinstance(src, dict):
            return Image.open(io.BytesIO(src["bytes"])) if src.get("bytes") else Image.open(src["path"])
        return Image.open(src)
    except (OSError, Image.DecompressionBombError) as exc:  # UnidentifiedImageError is an OSError
        raise unreadable_image(src, exc) from None


def unreadable_image(src, exc: Exception) -> DataError:
    if isinstance(src, dict):
        where = str(src.get("path") or "an image stored in the data set named by data.path")
    else:
        where = str(src)
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return DataError(where, f"not an image that can be read ({type(exc).__name__}: {reason})",
                     "replace the file with a readable PNG, JPEG or WebP, or remove it from the data "
                     "(data.path, data.validation_path)")


def crop_box(image_size: tuple[int, int], size: tuple[int, int]) -> tuple[int, int, int, int]:
    """(scaled width, scaled height, left, top) of `load_image`'s cover-and-centre-crop of an
    image of `image_size` to `size` (both width, height)."""
    iw, ih = image_size
    w, h = size
    scale = max(w / iw, h / ih)
    nw, nh = max(w, round(iw * scale)), max(h, round(ih * scale))
    return nw, nh, (nw - w) // 2, (nh - h) // 2


def image_size(src) -> tuple[int, int]:
    with open_image(src) as im:
        return im.size


def load_image(src, size: tuple[int, int]):
    """RGB tensor in [-1, 1], shape [3, h, w]: scaled to cover `size`, centre-cropped."""
    import numpy as np
    import torch
    from PIL import Image

    w, h = size
    with open_image(src) as im:
        try:
            im = im.convert("RGB")  # decodes: a truncated or damaged file fails here
        except (OSError, ValueError) as exc:
            raise unreadable_image(src, exc) from None
        nw, nh, left, top = crop_box(im.size, size)
        im = im.resize((nw, nh), Image.BICUBIC)
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
