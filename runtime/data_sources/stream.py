"""A streamed training set (``data.streaming = true``): split across ranks, resumable mid-epoch.

Each rank reads its own part of the stream (``datasets.distributed.split_dataset_by_node``:
whole files per rank when the file count divides by the ranks, else every world-th row), so
no row is read by two ranks. Rows are encoded and packed as they arrive. The stream is read
in a fixed order for a given seed and epoch (`datasets`' shuffle buffer, reseeded per epoch),
so the position in it, this rank's (epoch, rows given out), is enough to resume: it is saved in
every checkpoint (`save_state`, one small JSON per rank) and a resumed run skips exactly the
rows already trained on, neither repeating nor skipping any. An epoch ends where this rank's
part ends; the next epoch starts the stream again.

Batches are not passed through `accelerate.prepare` (which would re-shard or dispatch an
iterable set): `StreamLoader` batches this rank's rows and moves them to the device.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

SHUFFLE_BUFFER = 1000


class StreamRows(torch.utils.data.IterableDataset):
    """This rank's packed rows of a streamed data set."""

    streamed = True

    def __init__(self, ds, encoder, make_packer: Callable[[], Any], rank: int, world: int, seed: int,
                 shuffle: bool = True) -> None:
        from datasets.distributed import split_dataset_by_node

        if shuffle:
            ds = ds.shuffle(seed=seed, buffer_size=SHUFFLE_BUFFER)
        self.ds = split_dataset_by_node(ds, rank=rank, world_size=world) if world > 1 else ds
        self.encoder, self.make_packer = encoder, make_packer
        self.rank, self.world = rank, world
        self.epoch, self.position = 0, 0
        self.dropped = 0

    def _rows(self, epoch: int) -> Iterator[dict[str, Any]]:
        self.ds.set_epoch(epoch)
        packer = self.make_packer()
        for i, row in enumerate(self.ds):
            ids, labels = self.encoder.one(row, i * self.world + self.rank)
            yield from packer.add(ids, labels)
        yield from packer.finish()
        self.dropped = packer.dropped

    def __iter__(self) -> Iterator[dict[str, Any]]:
        skip = self.position
        for n, row in enumerate(self._rows(self.epoch)):
            if n < skip:
                continue
            self.position = n + 1
            yield row
        self.epoch, self.position = self.epoch + 1, 0

    # -- checkpoint -----------------------------------------------------------------------
    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "rank": self.rank, "world_size": self.world}

    def save(self, folder: Path) -> None:
        (folder / f"data_stream_rank{self.rank}.json").write_text(json.dumps(self.state()), encoding="utf-8")

    def load(self, folder: Path) -> bool:
        p = folder / f"data_stream_rank{self.rank}.json"
        if not p.is_file():
            return False
        st = json.loads(p.read_text(encoding="utf-8"))
        self.epoch, self.position = int(st["epoch"]), int(st["position"])
        return True


class StreamLoader:
    """Batches of a `StreamRows` on this rank's device (num_workers = 0: the position counted
    in the dataset is the position trained on)."""

    def __init__(self, rows: StreamRows, batch_size: int, collate: Callable, device) -> None:
        self.rows, self.batch_size, self.collate, self.device = rows, batch_size, collate, device
        self.loader = torch.utils.data.DataLoader(rows, batch_size=batch_size, collate_fn=collate, num_workers=0)

    def set_epoch(self, epoch: int) -> None:  # the stream keeps its own epoch (per rank)
        pass

    def __iter__(self):
        for batch in self.loader:
            yield {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
