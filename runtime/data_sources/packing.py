"""Documents -> training rows: packed with per-document position ids, or one per row, padded.

Packed (``data.packing = true``): documents are laid end to end in rows of ``seq_len``
tokens. Each row carries ``position_ids`` that restart at 0 where a document starts, and no
attention mask, so transformers' packed-sequence path (SDPA, eager, flash: masking_utils
``find_packed_sequence_indices``) keeps attention inside each document. The first token of
each document is not a target (its label is -100: nothing in its own document precedes it).
Raw text is wrapped: a document that does not fit the rest of a row continues in the next
(as a new sequence there). Chat and instruction documents are never cut: one that does not fit
starts a new row (the rest of the row is padding, labels -100), one longer than ``seq_len``
is dropped and counted.

Padded (``data.packing = false``): one document (raw text: one ``seq_len`` piece) per row;
`collate` pads a batch to its longest row with an attention mask.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

IGNORE = -100


class Packer:
    """Accumulates documents; `rows` yields finished rows as dicts of lists."""

    def __init__(self, seq_len: int, pad_id: int, wrap: bool, packed: bool) -> None:
        self.seq, self.pad, self.wrap, self.packed = seq_len, pad_id, wrap, packed
        self.ids: list[int] = []
        self.labels: list[int] = []
        self.pos: list[int] = []
        self.dropped = 0

    def add(self, ids: list[int], labels: list[int]) -> Iterator[dict[str, list[int]]]:
        """Rows finished by adding one document."""
        if not self.wrap and len(ids) > self.seq:
            self.dropped += 1
            return
        if not self.packed:
            for a in range(0, len(ids), self.seq):
                yield self._row(ids[a:a + self.seq], labels[a:a + self.seq], list(range(len(ids[a:a + self.seq]))))
            return
        while ids:
            room = self.seq - len(self.ids)
            if len(ids) > room and not self.wrap:
                yield self._flush()
                continue
            take = min(room, len(ids))
            self.ids += ids[:take]
            self.labels += [IGNORE] + labels[1:take]
            self.pos += list(range(take))
            ids, labels = ids[take:], labels[take:]
            if len(self.ids) == self.seq:
                yield self._flush()

    def _row(self, ids: list[int], labels: list[int], pos: list[int]) -> dict[str, list[int]]:
        return {"input_ids": ids, "labels": labels, "position_ids": pos, "real": [len(ids)]}

    def _flush(self) -> dict[str, list[int]]:
        real = len(self.ids)
        pad = self.seq - real
        row = {"input_ids": self.ids + [self.pad] * pad, "labels": self.labels + [IGNORE] * pad,
               "position_ids": self.pos + list(range(pad)), "real": [real]}
        self.ids, self.labels, self.pos = [], [], []
        return row

    def finish(self) -> Iterator[dict[str, list[int]]]:
        """The last, partial row: kept padded for chat/instruction, dropped for wrapped raw text
        (as plain concatenation packing does)."""
        if self.ids and not self.wrap:
            yield self._flush()
        self.ids, self.labels, self.pos = [], [], []


def pack_documents(docs: Iterable[tuple[list[int], list[int]]], seq_len: int, pad_id: int, wrap: bool,
                   packed: bool) -> tuple[dict[str, list[Any]], int]:
    """All rows of `docs` as columns, and how many documents were dropped for length."""
    p = Packer(seq_len, pad_id, wrap, packed)
    cols: dict[str, list[Any]] = {"input_ids": [], "labels": [], "position_ids": [], "real": []}
    for ids, labels in docs:
        for row in p.add(ids, labels):
            for k in cols:
                cols[k].append(row[k])
    for row in p.finish():
        for k in cols:
            cols[k].append(row[k])
    return cols, p.dropped


def collate_rows(samples: list[dict[str, Any]], pad_id: int, packed: bool) -> dict[str, Any]:
    """A batch of tensors. Packed rows (all ``seq_len`` long): input_ids, labels, position_ids.
    Padded rows: input_ids, labels, attention_mask (right padding). Both: ``n_real``, the
    count of real (not padding) tokens, a Python int (never moved to the device, so counting
    tokens per step costs no host sync)."""
    import torch

    real = sum(int(s["real"][0]) for s in samples)
    if packed:
        batch = {k: torch.tensor([list(s[k]) for s in samples], dtype=torch.long)
                 for k in ("input_ids", "labels", "position_ids")}
    else:
        width = max(len(s["input_ids"]) for s in samples)
        ids, labels, mask = [], [], []
        for s in samples:
            n = len(s["input_ids"])
            ids.append(list(s["input_ids"]) + [pad_id] * (width - n))
            labels.append(list(s["labels"]) + [IGNORE] * (width - n))
            mask.append([1] * n + [0] * (width - n))
        batch = {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels), "attention_mask": torch.tensor(mask)}
    batch["n_real"] = real
    return batch
