"""The causal-LM data pipeline: open -> detect format -> encode -> pack, cached by `datasets`.

Encoding and packing are `datasets.map` calls with a fingerprint made of the data set's own
fingerprint, the tokenizer (its serialised form and chat template) and every setting that
changes the rows, so a data set is tokenised once: `tuner run` prepares it in the launcher
before any rank starts (`check`), and each rank then finds the cache files (ranks also take
turns, main process first, in case the cache is cold). Streamed sets are encoded on the fly
(`stream.StreamRows`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...compiler.keys import paths as K
from .encode import Encoder, detect_format
from .errors import DataError
from .packing import Packer, pack_documents
from .source import Source, open_dataset, resolve

#: Bump when encoding or packing changes, so old cache files are not reused.
PIPELINE_VERSION = "1"
PACK_BATCH = 10_000
BUILTIN = "builtin"


@dataclass
class Stats:
    """What `tuner data` and the run summary report."""

    format: str = ""
    documents: int = 0
    dropped_for_length: int = 0
    rows: int | None = None
    tokens: int = 0
    real_tokens: int = 0
    trained_tokens: int = 0
    doc_lengths: list[int] = field(default_factory=list)

    @property
    def padding_ratio(self) -> float:
        return 1.0 - self.real_tokens / self.tokens if self.tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        lengths = sorted(self.doc_lengths)
        out: dict[str, Any] = {"format": self.format, "documents": self.documents, "rows": self.rows,
                               "dropped_for_length": self.dropped_for_length, "tokens": self.tokens,
                               "real_tokens": self.real_tokens, "trained_tokens": self.trained_tokens,
                               "padding_ratio": round(self.padding_ratio, 4)}
        if lengths:
            out["document_tokens"] = {"min": lengths[0], "median": lengths[len(lengths) // 2], "max": lengths[-1],
                                      "mean": round(sum(lengths) / len(lengths), 1)}
        return out


def source_specs(settings_data, which: str = "train") -> list[str]:
    if which == "validation":
        return [settings_data.validation_path] if settings_data.validation_path else []
    return list(settings_data.files) or [settings_data.path]


def open_source(settings_data, base_dir: Path, which: str = "train", bundled: Path | None = None):
    """(Source, dataset) for the training or validation data."""
    specs = source_specs(settings_data, which)
    if specs == [BUILTIN] and bundled is not None:
        specs = [str(bundled)]
    src = resolve(specs, base_dir, key=K.DATA_VALIDATION_PATH if which == "validation" else K.DATA_PATH)
    split = "train" if which == "validation" and src.folder is None else settings_data.split
    return src, open_dataset(src, split, streaming=bool(settings_data.streaming) and which == "train")


def tokenizer_key(tok) -> str:
    h = hashlib.sha256()
    backend = getattr(tok, "backend_tokenizer", None)
    h.update((backend.to_str() if backend is not None else repr(sorted(tok.get_vocab().items()))).encode())
    h.update(repr(getattr(tok, "chat_template", None)).encode())
    h.update(repr((tok.eos_token_id, tok.bos_token_id, tok.pad_token_id, getattr(tok, "add_bos_token", None))).encode())
    return h.hexdigest()[:16]


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps([PIPELINE_VERSION, *parts], sort_keys=True, default=str).encode()).hexdigest()[:32]


def pad_id(tok) -> int:
    for t in (tok.pad_token_id, tok.eos_token_id, 0):
        if t is not None:
            return int(t)
    return 0


class Pipeline:
    """Encodes and packs one data set for one tokenizer and the `[data]` settings."""

    def __init__(self, tok, settings_data, base_dir: Path, bundled: Path | None = None) -> None:
        self.tok, self.d, self.base_dir, self.bundled = tok, settings_data, base_dir, bundled
        self.packed = bool(settings_data.packing)

    def settings_key(self, fmt: str) -> dict[str, Any]:
        d = self.d
        return {"fmt": fmt, "seq": d.seq_len, "packing": self.packed, "masked": d.completion_only_loss,
                "cols": [d.text_column, d.messages_column, d.prompt_column, d.completion_column],
                "tok": tokenizer_key(self.tok)}

    def encoded(self, src: Source, ds, fmt: str):
        """The data set with input_ids, labels and length per document (cached)."""
        enc = Encoder(self.tok, fmt, self.d, src.where())
        fp = _fingerprint("encode", ds._fingerprint, self.settings_key(fmt))
        try:
            return ds.map(enc, batched=True, with_indices=True, remove_columns=ds.column_names, new_fingerprint=fp,
                          desc="tokenising")
        except DataError:
            raise
        except Exception as exc:  # datasets wraps errors of the function in a few cases
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, DataError):
                raise cause from None
            raise

    def rows(self, encoded, fmt: str, stats: Stats):
        """Packed (or padded) rows of the encoded documents (cached)."""
        seq, wrap = self.d.seq_len, fmt == "text"
        lengths = encoded["length"]
        stats.documents, stats.doc_lengths = len(lengths), list(lengths)
        if not wrap:
            stats.dropped_for_length = sum(1 for n in lengths if n > seq)
        pid = pad_id(self.tok)
        packed = self.packed

        def pack(batch: dict[str, list]) -> dict[str, list]:
            cols, _ = pack_documents(zip(batch["input_ids"], batch["labels"], strict=False), seq, pid, wrap, packed)
            return cols

        fp = _fingerprint("pack", encoded._fingerprint, self.settings_key(fmt))
        rows = encoded.map(pack, batched=True, batch_size=PACK_BATCH, remove_columns=encoded.column_names,
                           new_fingerprint=fp, desc="packing")
        stats.rows = len(rows)
        real = rows["real"]
        stats.real_tokens = sum(r[0] for r in real)
        stats.tokens = stats.rows * seq if packed else stats.real_tokens
        stats.trained_tokens = sum(sum(1 for x in lab if x != -100) for lab in rows["labels"])
        return rows

    def build(self, which: str = "train"):
        """(rows dataset, Stats); a streamed training set gives (StreamRows source, Stats)."""
        src, ds = open_source(self.d, self.base_dir, which, self.bundled)
        columns = ds.column_names or list(next(iter(ds)).keys())
        stats = Stats(format=detect_format(list(columns), self.d, src.where()))
        if self.d.streaming and which == "train":
            return (src, ds), stats
        return self.rows(self.encoded(src, ds, stats.format), stats.format, stats), stats

    def split_validation(self, rows, stats: Stats):
        """(train, validation) rows: the last ``validation_split`` of the rows when no
        validation_path is given (rows of whole documents for chat/instruction)."""
        frac = self.d.validation_split
        if self.d.validation_path or frac <= 0 or len(rows) < 2:
            return rows, None
        n_val = max(1, int(len(rows) * frac))
        return rows.select(range(len(rows) - n_val)), rows.select(range(len(rows) - n_val, len(rows)))

    def stream_packer(self, fmt: str) -> Packer:
        return Packer(self.d.seq_len, pad_id(self.tok), wrap=fmt == "text", packed=self.packed)


@contextlib.contextmanager
def main_process_first():
    """Rank 0 runs the body first (filling the cache), the other ranks after it."""
    import torch.distributed as dist

    on = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    if on and dist.get_rank() != 0:
        dist.barrier()
    try:
        yield
    finally:
        if on and dist.get_rank() == 0:
            dist.barrier()
