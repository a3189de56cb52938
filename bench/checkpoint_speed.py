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
* disk read: a file of the same size read sequentially in 16 MiB blocks, its pages dropped first.

The ratios printed are durable-save / disk-write and load / disk-read throughput (target >= 0.5),
each the median of three.
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=15)
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary folder in /tmp)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tuner-ckpt-bench-", dir=args.dir))
    mb = 1e6
    try:
        acc, n = build(args.layers)
        rows = []
        for i in range(3):
            ck = root / f"ckpt{i}"
            t0 = time.perf_counter()
            acc.save_state(str(ck))
            held = time.perf_counter() - t0
            fsync_all(ck)
            durable = time.perf_counter() - t0
            nbytes = sum(p.stat().st_size for p in files_under(ck))
            w = disk_write(root / "disk.bin", nbytes)
            drop_cache(files_under(ck))
            t0 = time.perf_counter()
            acc.load_state(str(ck))
            load = time.perf_counter() - t0
            r = disk_read(root / "disk.bin")
            rows.append((nbytes, held, durable, w, load, r))
            print(f"try {i + 1}: {nbytes / mb:.0f} MB; save_state {held:.2f} s (holds the loop), with fsync "
                  f"{durable:.2f} s; disk write {w:.2f} s; load_state {load:.2f} s; disk read {r:.2f} s", flush=True)
            shutil.rmtree(ck)
        nbytes = rows[0][0]
        med = [statistics.median(r[k] for r in rows) for k in range(1, 6)]
        held, durable, w, load, r = med
        print(f"\nmodel {n / 1e6:.0f}M parameters; checkpoint {nbytes / mb:.0f} MB (model + AdamW moments)")
        print(f"save:  {nbytes / durable / mb:7.0f} MB/s durable ({nbytes / held / mb:.0f} MB/s until save_state "
              f"returns); disk write {nbytes / w / mb:7.0f} MB/s; ratio {w / durable:.2f}")
        print(f"load:  {nbytes / load / mb:7.0f} MB/s; disk read {nbytes / r / mb:7.0f} MB/s; ratio {r / load:.2f}")
        print(f"a save holds the training loop for {held:.2f} s (median of 3)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
