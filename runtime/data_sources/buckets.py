"""`BucketBatchSampler`: every optimizer step's global batch from one aspect bucket.

The trainer's data loader takes it as its ``batch_sampler``; accelerate shards it across
ranks (micro-batch ``i`` goes to rank ``i % world``), so the sampler yields, per optimizer
step, ``world × gradient_accumulation_steps`` consecutive micro-batches of one bucket: every
rank's micro-batches of that step, and every accumulation step of it, hold images of the
same size.

An epoch (seeded by the seed and the epoch number, the same on every rank):

1. each bucket's images are shuffled and cut into groups of ``G = micro_batch × world ×
   accumulation`` images, one group per optimizer step;
2. a bucket's remainder (fewer than ``G`` images) is completed with images of the same
   bucket drawn again, from the start of its shuffled order: every image is trained at least
   once per epoch, the fill images twice; a bucket smaller than ``G`` repeats its images to
   fill one group (validation, ``shuffle=False``, keeps its order and the same fill rule);
3. the groups are shuffled, so buckets interleave over the epoch.
"""

from __future__ import annotations

import random
from collections.abc import Iterator


class _Epoch:
    """What accelerate's ``DataLoaderShard.set_epoch`` reaches (``batch_sampler.sampler``)."""

    def __init__(self, owner: BucketBatchSampler) -> None:
        self.owner = owner

    def set_epoch(self, epoch: int) -> None:
        self.owner.set_epoch(epoch)


class BucketBatchSampler:
    def __init__(self, bucket_of: list[int], micro_batch: int, world: int, accumulation: int = 1,
                 seed: int = 0, shuffle: bool = True) -> None:
        if not bucket_of:
            raise ValueError("no images to sample")
        self.bucket_of = list(bucket_of)
        self.batch_size = int(micro_batch)  # accelerate's BatchSamplerShard reads these two
        self.drop_last = True
        self.world, self.accumulation = int(world), int(accumulation)
        self.seed, self.shuffle, self.epoch = int(seed), shuffle, 0
        self.sampler = _Epoch(self)

    @property
    def group(self) -> int:
        """Images per optimizer step across all ranks."""
        return self.batch_size * self.world * self.accumulation

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def groups(self) -> list[tuple[int, list[int]]]:
        """This epoch's (bucket, image indices) per optimizer step, in training order."""
        rng = random.Random(f"{self.seed}:{self.epoch}")
        members: dict[int, list[int]] = {}
        for i, b in enumerate(self.bucket_of):
            members.setdefault(b, []).append(i)
        out: list[tuple[int, list[int]]] = []
        for b in sorted(members):
            idx = members[b][:]
            if self.shuffle:
                rng.shuffle(idx)
            need = -len(idx) % self.group
            fill = [idx[k % len(idx)] for k in range(need)]
            idx = idx + fill
            out.extend((b, idx[s:s + self.group]) for s in range(0, len(idx), self.group))
        if self.shuffle:
            rng.shuffle(out)
        return out

    def __iter__(self) -> Iterator[list[int]]:
        for _, idx in self.groups():
            for s in range(0, len(idx), self.batch_size):
                yield idx[s:s + self.batch_size]

    def __len__(self) -> int:
        """Micro-batches in an epoch, all ranks together (a multiple of world × accumulation)."""
        counts: dict[int, int] = {}
        for b in self.bucket_of:
            counts[b] = counts.get(b, 0) + 1
        steps = sum(-(-n // self.group) for n in counts.values())
        return steps * self.world * self.accumulation


def bucket_sampler(ds, training, world: int, shuffle: bool, seed: int = 0) -> BucketBatchSampler:
    """Every optimizer step's global batch from one bucket of `ds` (an `ImageDataset`);
    validation (``shuffle=False``): one accumulation step, unshuffled."""
    accumulation = training.gradient_accumulation_steps if shuffle else 1
    return BucketBatchSampler(ds.bucket_of, training.micro_batch_size, world, accumulation, seed, shuffle)
