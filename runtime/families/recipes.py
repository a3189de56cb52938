"""What a family gives the data driver (runtime/data_sources/driver.py): its answer to
`Family.data_recipe`, one of three shapes. The driver does the rest: reading, formats,
templates, packing, streaming, tokenising, collation, batch sampling."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TextData:
    """A language model: chat, instruction or raw-text rows tokenised, packed or padded."""

    tokenizer: Any
    """Its tokenizer (the driver sets ``data.chat_template`` on it when given)."""
    packed: bool
    """Whether rows are packed (position ids, no attention mask); else padded batches."""


@dataclass(frozen=True)
class PairData:
    """An embedding model: query/positive(/negatives) pairs, tokenised per batch."""

    tokenizer: Any


@dataclass(frozen=True)
class ImageData:
    """A diffusion model: images with captions, each at its aspect bucket, every optimizer
    step's global batch from one bucket."""

    multiple: int
    """Each bucket side is a multiple of it (the denoiser's downsampling x the VAE's factor)."""
    square: bool
    """Every image at ``data.resolution`` squared (a DiT unpatchifies to a square)."""
    tokenize: Callable[[list[str]], dict[str, Any]] | None = None
    """Captions -> the text encoder's inputs for a batch read without the cache; None: the
    model takes no text (captions are then not checked)."""


DataRecipe = TextData | PairData | ImageData
