"""The one data driver: file -> batch for every family, the same sequence for the check before
any rank starts (`tuner run`'s launcher, `tuner check`, `tuner data`) and for the training ranks.

A family supplies only what is its own, through the hooks `Family` declares (families/base.py,
its answer to `data_recipe` shaped by families/recipes.py):

* a language model (`TextData`: its tokenizer, whether its attention takes packed rows): the
  source, the chat template (``data.chat_template``), format detection, tokenising in pieces
  (cached by `datasets`), packing or padding, the validation rows, a stream split across
  ranks, collation, all here;
* an embedding model (`PairData`: its tokenizer): the pairs (`pairs.py`), the hold-out, the
  tokenised batches;
* a diffusion model (`ImageData`: its bucket multiple, its caption tokenizer): the images and
  captions (`images.py`), each at its aspect bucket (`image_sets.py`), the batches
  (`image_batches.py`), the bucket sampler (`buckets.py`); `Family.prepare_examples` then
  encodes the latent cache with the family's VAE and text encoder.

`rank_data` is what a rank trains on (`RankData`); `check_data` is the launcher's check (one
summary line, or a `DataError`), which also fills the tokenised cache the ranks then read.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...compiler.keys import paths as K
from .buckets import bucket_sampler
from .causal import Pipeline, Stats, main_process_first, pad_id
from .chat import load_template
from .encode import Encoder
from .errors import DataError
from .image_batches import collate_images, image_sets
from .packing import collate_rows
from .pairs import PairCollator, pair_sets
from .rows import RowsDataset
from .stream import StreamRows

if TYPE_CHECKING:
    from ..families.base import Family
    from ..families.recipes import TextData

#: Rows of a streamed set that are encoded before the ranks start.
STREAM_CHECK_ROWS = 200


def bundled_corpus() -> Path:
    """What ``data.path = "builtin"`` names for a language model: the corpus tuner ships."""
    return Path(str(resources.files("tuner.runtime") / "data" / "corpus.jsonl"))


@dataclass
class RankData:
    """What one rank trains on: the datasets, how a batch is made of their items, and the
    batch sampler (None: the trainer batches by ``micro_batch_size``)."""

    train: Any
    val: Any | None
    collate: Callable[[list[Any]], dict[str, Any]]
    sampler: Callable[[Any, Any, int, bool], Any]
    stats: dict[str, Any] = field(default_factory=dict)
    packed: bool | None = None
    stream: StreamRows | None = None

    @property
    def streamed(self) -> bool:
        """A stream's length is unknown (the run counts steps) and each rank reads its own part."""
        return self.stream is not None

    def batch_sampler(self, ds: Any, training: Any, world: int, shuffle: bool) -> Any:
        return self.sampler(ds, training, world, shuffle)


def _no_sampler(ds: Any, training: Any, world: int, shuffle: bool) -> None:
    return None


def text_pipeline(text: TextData, settings: Any, base_dir: Path) -> Pipeline:
    """The language-model pipeline for the family's tokenizer, ``data.chat_template`` set on it."""
    tok = text.tokenizer
    template = load_template(settings.data.chat_template, base_dir)
    if template and tok.chat_template != template:
        tok.chat_template = template
    pipe = Pipeline(tok, settings.data, base_dir, bundled_corpus())
    pipe.packed = text.packed
    return pipe


def text_sets(pipe: Pipeline) -> tuple[Any, Any | None, Stats]:
    """(train, validation, Stats): the one sequence the check and the ranks both run. A streamed
    training set is (Source, stream), encoded as it is read."""
    d = pipe.d
    train, stats = pipe.build("train")
    val = None
    if d.validation_path:
        val, _ = pipe.build("validation")
    elif not d.streaming:
        train, val = pipe.split_validation(train, stats)
    return train, val, stats


def rank_data(fam: Family, world: int | None = None) -> RankData:
    """What this rank (``fam.ctx.rank`` of `world`, default ``fam.ctx.world_size``) trains on."""
    from ..families.recipes import ImageData, PairData

    world = fam.ctx.world_size if world is None else world
    recipe = fam.data_recipe()
    s = fam.settings
    if isinstance(recipe, PairData):
        train, val = pair_sets(s.data, fam.ctx.base_dir, fam.ctx.seed)
        return RankData(train, val, PairCollator(recipe.tokenizer, s.data.seq_len), _no_sampler)
    if isinstance(recipe, ImageData):
        images, held_out = image_sets(recipe, s.data, fam.ctx)
        fam.prepare_examples(images, held_out)  # e.g. the latent cache, with the family's encoders
        return RankData(images, held_out, functools.partial(collate_images, tokenize=recipe.tokenize, extra=recipe.extra),
                        functools.partial(bucket_sampler, seed=fam.ctx.seed))
    return _text_rank_data(fam, recipe, world)


def _text_rank_data(fam: Family, text: TextData, world: int) -> RankData:
    s = fam.settings
    pipe = text_pipeline(text, s, fam.ctx.base_dir)
    with main_process_first():  # rank 0 fills the cache, the others read it
        train, val, stats = text_sets(pipe)
    stream = None
    if s.data.streaming:
        src, ds = train
        enc = Encoder(pipe.tok, stats.format, s.data, src.where())
        train = stream = StreamRows(ds, enc, lambda: pipe.stream_packer(stats.format), fam.ctx.rank, world,
                                    fam.ctx.seed)
    else:
        train = RowsDataset(train, pipe.packed)
    fam.stream = stream  # its position is saved with each checkpoint (Family.save_state)
    collate = functools.partial(collate_rows, pad_id=pad_id(pipe.tok), packed=pipe.packed)
    return RankData(train, RowsDataset(val, pipe.packed) if val is not None and len(val) else None, collate,
                    _no_sampler, stats.to_dict(), pipe.packed, stream)


def check_data(fam: Family) -> str | None:
    """Before any rank starts: open and check the data (a language model's is tokenised and
    packed into the cache the ranks read; a stream is checked on its first rows). One summary
    line, or None when the family checks nothing."""
    from ..families.recipes import ImageData, PairData, TextData

    recipe = fam.data_recipe()
    if isinstance(recipe, PairData):
        train, val = pair_sets(fam.settings.data, fam.ctx.base_dir, fam.ctx.seed)
        return f"data: {fam.settings.data.path}: {len(train)} training pairs, {len(val) if val else 0} held out"
    if isinstance(recipe, ImageData):
        # Every image opened for its bucket as the ranks will (its header, not its pixels):
        # a file that is no image is named here, before any rank starts.
        images, held_out = image_sets(recipe, fam.settings.data, fam.ctx)
        return (f"data: {fam.settings.data.path}: {len(images)} images in {len(images.buckets)} aspect "
                f"bucket(s), {len(held_out) if held_out is not None else 0} held out")
    if not isinstance(recipe, TextData):
        return None
    text = recipe
    s = fam.settings
    d, t = s.data, s.training
    if d.streaming and t.max_steps <= 0:
        raise DataError(K.DATA_STREAMING, "a stream's length is unknown, so the run needs a step count",
                        "set training.max_steps")
    pipe = text_pipeline(text, s, fam.ctx.base_dir)
    train, val, stats = text_sets(pipe)
    if d.streaming:
        src, ds = train
        enc = Encoder(pipe.tok, stats.format, d, src.where())
        n = 0
        for i, row in enumerate(ds):
            enc.one(row, i)
            n += 1
            if n >= STREAM_CHECK_ROWS:
                break
        return f"data: {src.label} ({stats.format}, streamed; the first {n} rows checked)"
    need = t.micro_batch_size * fam.ctx.world_size * t.gradient_accumulation_steps
    if len(train) < need:
        raise DataError(", ".join(d.files) or d.path,
                        f"{len(train)} training rows after packing, fewer than one optimizer step needs "
                        f"(micro_batch_size {t.micro_batch_size} x {fam.ctx.world_size} ranks x "
                        f"gradient_accumulation_steps {t.gradient_accumulation_steps} = {need})",
                        "add data, or lower the batch or data.seq_len")
    return summary(", ".join(d.files) or d.path, stats, d.seq_len, pipe.packed, len(val) if val is not None else 0)


def summary(label: str, stats: Stats, seq_len: int, packed: bool, val_rows: int) -> str:
    how = f"packed into {stats.rows} rows of {seq_len} tokens" if packed else f"{stats.rows} padded rows"
    dropped = f", {stats.dropped_for_length} dropped (longer than data.seq_len)" if stats.dropped_for_length else ""
    pad = f", padding {stats.padding_ratio:.0%}" if packed else ""
    val = f"; {val_rows} validation rows" if val_rows else ""
    return f"data: {label} ({stats.format}): {stats.documents} documents {how}{dropped}{pad}{val}"
