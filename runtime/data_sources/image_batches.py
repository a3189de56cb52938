"""A diffusion model's data, file -> batch: the image and caption rows of ``data.path`` (or
``data.validation_path``, or the seeded ``data.validation_split`` hold-out), each image at
its aspect bucket (`image_sets.ImageDataset`), and a batch of them: cached latents and
embeddings stacked, or the images loaded at the batch's bucket and the captions tokenised by
the family's text side (`recipes.ImageData.tokenize`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .image_sets import DATA_DIR, ImageDataset, load_image, split_rows, validation_prompts
from .images import check_captions, is_dataset_source, read_image_dataset, read_image_folder

if TYPE_CHECKING:
    from ..families.base import FamilyContext
    from ..families.recipes import ImageData


def read_rows(path: str, settings_data: Any, base_dir: Path, recipe: ImageData, rank: int = 0):
    """(rows, datasets table or None) of ``data.path`` or ``data.validation_path``; captions
    are checked when the model takes text (a warning on rank 0 when some are empty)."""
    d = settings_data
    src = DATA_DIR if path == "builtin" else _at(path, base_dir)
    if is_dataset_source(src):
        rows, table = read_image_dataset(src, d.image_column, d.caption_column)
    else:
        rows, table = read_image_folder(src, d.caption_column), None
    if recipe.tokenize is not None:  # text-conditioned
        warning = check_captions(rows, str(src), d.caption_dropout)
        if warning and rank == 0:
            print(f"tuner run: {warning}", file=sys.stderr, flush=True)
    return rows, table


def _at(path: str, base_dir: Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else base_dir / p


def image_sets(recipe: ImageData, settings_data: Any, ctx: FamilyContext) -> tuple[ImageDataset, ImageDataset | None]:
    """(train, validation) image sets; the training set drops captions at
    ``data.caption_dropout`` (seeded per rank), the validation set keeps them."""
    d = settings_data

    def dataset(rows, table, **kw) -> ImageDataset:
        return ImageDataset(rows, d.resolution, recipe.multiple, table, square=recipe.square, **kw)

    rows, table = read_rows(d.path, d, ctx.base_dir, recipe, ctx.rank)
    dropout: dict[str, Any] = dict(caption_dropout=d.caption_dropout, seed=ctx.seed + ctx.rank)
    val: ImageDataset | None
    if d.validation_path:
        val_rows, val_table = read_rows(d.validation_path, d, ctx.base_dir, recipe, ctx.rank)
        train, val = dataset(rows, table, **dropout), dataset(val_rows, val_table)
    else:
        train_rows, val_rows = split_rows(rows, d.validation_split, ctx.seed)
        train = dataset(train_rows, table, **dropout)
        val = dataset(val_rows, table) if val_rows else None
    return train, val


def prompts_of(val_ds: ImageDataset | None) -> tuple[list[str], list[int]]:
    """The prompts (and labels) validation samples: the validation set's captions, else the
    built-in images'."""
    return validation_prompts(val_ds.rows if val_ds is not None else read_image_folder(DATA_DIR))


def collate_images(samples: list[dict[str, Any]], tokenize=None) -> dict[str, Any]:
    """Cached latents and embeddings stacked; or images loaded at the batch's bucket (the
    first item's: the sampler gives a batch one bucket) and captions tokenised."""
    import torch

    batch = {"labels": torch.tensor([int(s["label"]) for s in samples])}
    if "latents" in samples[0]:
        batch.update({k: torch.stack([s[k] for s in samples]) for k in ("latents", "hidden", "pooled")
                      if k in samples[0]})
        return batch
    batch["pixel_values"] = torch.stack([load_image(s["image"], samples[0]["size"]) for s in samples])
    if tokenize is not None:
        batch.update(tokenize([s["caption"] for s in samples]))
    return batch
