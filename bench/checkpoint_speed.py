"""Checkpoint save and load throughput as a ratio to this disk's own sequential write and read
speed, measured in the same run, and how long a save holds the training loop.

    python bench/checkpoint_speed.py [--layers 15] [--dir DIR]

One process, what `tuner run`'s trainer calls on each rank: an ``Accelerator`` prepares a Llama
(107M parameters at 15 layers, fp32) and AdamW, trains one step (so the optimizer holds its two
moments), then ``accelerator.save_state(DIR)`` (model.safetensors, optimizer.bin, scheduler,
RNG) and ``accelerator.load_state(DIR)``, three times each.

* save: the seconds ``save_state`` takes, which is the time the training loop is held (the save
  is synchronous: the next step starts when it returns), and the same plus ``fsync`` of every
  file written (the bytes on disk, not only in the page cache);
* disk write: the same number of bytes written sequentially in 16 MiB blocks, then ``fsync``;
* load: ``load_state`` after ``posix_fadvise(DONTNEED)`` dropped the checkpoint's pages from the
  page cache (read from the disk, not from memory);
* disk read: a file of the same size read sequentially in 16 MiB blocks, its pages dropped first;
* load from the page cache: ``load_state`` again once every file was read (the loaders' own
  work, no disk): the disk read time over it is the most the load ratio could reach with any
  reading scheme.

Two arms, interleaved in every try so that both meet the same load: the libraries' defaults
(what `tuner run` did before) and tuner's (runtime/checkpoint_io.py's ``quick_save``: torch.save
without its CRC-32, which torch.load never checks; the load is the same in both). The page cache is defeated the same way for the
checkpoint and for the disk's reference: ``fsync`` then ``posix_fadvise(DONTNEED)`` of every
file before it is read (a VM's host may still cache beneath; that favours both alike).
The ratios printed are durable-save / disk-write and load / disk-read throughput (target >= 0.5),
each the median of the tries.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

BLOCK = 16 * 2**20


def files_under(d: Path) -> list[Path]:
    return [p for p in d.rglob("*") if p.is_file()]


def fsync_all(d: Path) -> None:
    for p in files_under(d):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def drop_cache(paths: list[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def disk_write(path: Path, nbytes: int) -> float:
    block = os.urandom(BLOCK)
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            left -= f.write(block[:min(BLOCK, left)])
        f.flush()
        os.fsync(f.fileno())
    return time.perf_counter() - t0


def disk_read(path: Path) -> float:
    drop_cache([path])
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(BLOCK):
            pass
    return time.perf_counter() - t0


def build(layers: int):
    import torch
    from accelerate import Accelerator
    from transformers import LlamaConfig, LlamaForCausalLM, get_scheduler

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=768, intermediate_size=2048, num_hidden_layers=layers,
                      num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=512,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    sched = get_scheduler("constant", opt)
    acc = Accelerator(cpu=True)
    model, opt, sched = acc.prepare(model, opt, sched)
    ids = torch.randint(0, 512, (1, 32))
    loss = model(input_ids=ids, labels=ids).loss
    acc.backward(loss)
    opt.step()
    sched.step()
    opt.zero_grad()
    return acc, sum(p.numel() for p in model.parameters())


def one_try(acc, ck: Path, quick: bool) -> tuple[int, float, float, float, float]:
    """(bytes, seconds save_state held the loop, seconds until fsync'ed, seconds to load_state
    from the disk, seconds to load_state again with every file in the page cache)."""
    from tuner.runtime.checkpoint_io import quick_save

    t0 = time.perf_counter()
    with quick_save() if quick else contextlib.nullcontext():
        acc.save_state(str(ck))
    held = time.perf_counter() - t0
    fsync_all(ck)
    durable = time.perf_counter() - t0
    nbytes = sum(p.stat().st_size for p in files_under(ck))
    drop_cache(files_under(ck))
    t0 = time.perf_counter()
    acc.load_state(str(ck))
    load = time.perf_counter() - t0
    for p in files_under(ck):  # in the page cache: what is left is the loaders' own work
        with open(p, "rb", buffering=0) as f:
            while f.read(BLOCK):
                pass
    t0 = time.perf_counter()
    acc.load_state(str(ck))
    warm = time.perf_counter() - t0
    shutil.rmtree(ck)
    return nbytes, held, durable, load, warm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=15)
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary folder in /tmp)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tuner-ckpt-bench-", dir=args.dir))
    mb = 1e6
    arms = {"libraries' defaults": False, "tuner (quick_save)": True}
    try:
        acc, n = build(args.layers)
        rows: dict[str, list] = {a: [] for a in arms}
        disk = []
        for i in range(args.tries):
            for arm, quick in arms.items():  # interleaved: both arms see the same load
                nbytes, held, durable, load, warm = one_try(acc, root / "ckpt", quick)
                rows[arm].append((nbytes, held, durable, load, warm))
                print(f"try {i + 1} {arm}: {nbytes / mb:.0f} MB; save_state {held:.2f} s (holds the loop), with fsync "
                      f"{durable:.2f} s; load_state {load:.2f} s, from the page cache {warm:.2f} s", flush=True)
            w = disk_write(root / "disk.bin", nbytes)
            r = disk_read(root / "disk.bin")
            disk.append((w, r))
            print(f"try {i + 1} disk: write {w:.2f} s, read {r:.2f} s", flush=True)
        w, r = (statistics.median(d[k] for d in disk) for k in range(2))
        print(f"\nmodel {n / 1e6:.0f}M parameters; checkpoint {nbytes / mb:.0f} MB (model + AdamW moments); "
              f"disk write {nbytes / w / mb:.0f} MB/s, read {nbytes / r / mb:.0f} MB/s (medians of {args.tries})")
        for arm, rs in rows.items():
            held, durable, load, warm = (statistics.median(x[k] for x in rs) for k in range(1, 5))
            print(f"{arm}: save {nbytes / durable / mb:.0f} MB/s durable, ratio {w / durable:.2f}; load "
                  f"{nbytes / load / mb:.0f} MB/s, ratio {r / load:.2f} (from the page cache: {nbytes / warm / mb:.0f} "
                  f"MB/s, the most the ratio could be: {r / warm:.2f}); a save holds the loop {held:.2f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
