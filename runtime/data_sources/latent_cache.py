"""The latent and text-embedding cache: each image encoded by the VAE and each caption by the
text encoder once, before training, by exactly one rank; the training step reads the files.

On disk (``data.cache_dir``, default ``OUTPUT_DIR/cache``)::

    latents/ab/<key>.pt    {"latents": [C, h, w]}        one per (image, bucket, VAE)
    text/cd/<key>.pt       {"hidden": [L, D], "pooled": [P]}   one per (caption, text encoder)
    ledger/rank<R>.jsonl   one line per entry a rank encoded: {"kind", "key", "rank", "world", "time"}

Keys are content hashes, so nothing needs invalidating by hand: a latent's key is the sha256
of the image's bytes, its bucket (width × height) and the VAE's fingerprint (its config and
weight files; "pixels" for pixel-space models); a text entry's key is the sha256 of the
caption and the text encoder's fingerprint. A changed image, caption, resolution, bucket or
encoder gives a new key: only that entry is encoded again; the old file stays, counted as
stale (`status`, `tuner data`), and serves again if the change is undone.
The empty caption's embedding (caption dropout's unconditional case) is one text entry.

Building (`build`, every rank): every rank lists the entries the data needs and which are
missing, then (after a barrier) encodes ``missing[rank::world]`` and writes each file
atomically (temporary name, then rename); a rank then waits, polling the folder, until every
entry exists. A run killed mid-build leaves whole files only, and the next build encodes what
is missing; nothing depends on the world size, so a cache built on 2 ranks serves 1.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CACHE_VERSION = "1"
KINDS = ("latent", "text")
_DIRS = {"latent": "latents", "text": "text"}


def digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p).encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def folder_fingerprint(folder: Path) -> str:
    """A model folder's identity: its config files' bytes and its weight files' names, sizes
    and modification times (weights are not read)."""
    parts: list[str] = []
    for p in sorted(folder.iterdir()):
        if p.suffix == ".json":
            parts.append(p.name + ":" + hashlib.sha256(p.read_bytes()).hexdigest())
        elif p.is_file():
            st = p.stat()
            parts.append(f"{p.name}:{st.st_size}:{st.st_mtime_ns}")
    return digest(*parts)


@dataclass(frozen=True)
class Entry:
    """One thing to encode: a latent (``source`` = the image, ``size`` its bucket) or a text
    embedding (``source`` = the caption)."""

    kind: str
    key: str
    source: Any = None
    size: tuple[int, int] = (0, 0)


class LatentCache:
    def __init__(self, root: Path, vae_id: str, text_id: str | None) -> None:
        self.root = Path(root)
        self.vae_id, self.text_id = vae_id, text_id

    # -- keys and files -------------------------------------------------------------
    def latent_key(self, image_sha: str, size: tuple[int, int]) -> str:
        return digest("latent", CACHE_VERSION, image_sha, size[0], size[1], self.vae_id)

    def text_key(self, caption: str) -> str:
        return digest("text", CACHE_VERSION, caption, self.text_id)

    def path(self, kind: str, key: str) -> Path:
        return self.root / _DIRS[kind] / key[:2] / f"{key}.pt"

    def has(self, e: Entry) -> bool:
        return self.path(e.kind, e.key).is_file()

    def load(self, kind: str, key: str) -> dict[str, Any]:
        import torch

        return torch.load(self.path(kind, key), map_location="cpu", weights_only=True)

    def save(self, kind: str, key: str, tensors: dict[str, Any]) -> None:
        import torch

        final = self.path(kind, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        torch.save({k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}, tmp)
        os.replace(tmp, final)

    # -- state ----------------------------------------------------------------------
    def on_disk(self) -> set[tuple[str, str]]:
        out: set[tuple[str, str]] = set()
        for kind in KINDS:
            d = self.root / _DIRS[kind]
            if d.is_dir():
                out.update((kind, p.stem) for p in d.glob("*/*.pt"))
        return out

    def status(self, entries: Iterable[Entry], kind: str | None = None) -> dict[str, int]:
        """``built`` (wanted and on disk), ``missing`` (wanted, not on disk), ``stale`` (on
        disk, wanted by no item: an old image, caption, bucket or encoder); of one `kind` or all."""
        wanted = {(e.kind, e.key) for e in entries if kind in (None, e.kind)}
        disk = {d for d in self.on_disk() if kind in (None, d[0])}
        return {"built": len(wanted & disk), "missing": len(wanted - disk), "stale": len(disk - wanted)}

    def ledger(self) -> list[dict[str, Any]]:
        """Every entry each rank encoded, over all builds into this folder."""
        rows: list[dict[str, Any]] = []
        for f in sorted((self.root / "ledger").glob("rank*.jsonl")):
            rows.extend(json.loads(line) for line in f.read_text().splitlines() if line.strip())
        return rows

    # -- building -------------------------------------------------------------------
    def build(self, entries: list[Entry], encode: Callable[[str, list[Entry]], list[dict[str, Any]]],
              rank: int = 0, world: int = 1, barrier: Callable[[], None] = lambda: None,
              chunk: int = 8, poll_s: float = 0.2) -> int:
        """Encode what is missing, `rank`'s share of it; return how many entries this rank
        encoded. `encode(kind, entries)` returns one tensor dict per entry."""
        unique = sorted({(e.kind, e.key): e for e in entries}.values(), key=lambda e: (e.kind, e.key))
        missing = [e for e in unique if not self.has(e)]
        barrier()  # every rank has its list before any rank writes
        mine = missing[rank::world]
        ledger = self.root / "ledger" / f"rank{rank}.jsonl"
        ledger.parent.mkdir(parents=True, exist_ok=True)
        for kind in KINDS:
            todo = [e for e in mine if e.kind == kind]
            todo.sort(key=lambda e: e.size)  # latents of one size encode together
            for s in range(0, len(todo), chunk):
                part = todo[s:s + chunk]
                for e, tensors in zip(part, encode(kind, part), strict=True):
                    self.save(e.kind, e.key, tensors)
                with ledger.open("a") as f:
                    f.writelines(json.dumps({"kind": e.kind, "key": e.key, "rank": rank, "world": world,
                                             "time": time.time()}) + "\n" for e in part)
        self._wait(missing, rank, world, poll_s)
        barrier()
        return len(mine)

    def _wait(self, missing: list[Entry], rank: int, world: int, poll_s: float) -> None:
        """Poll until the other ranks' entries exist (no collective: a long build must not
        hit the process group's timeout); say what is awaited every 30 s."""
        said = time.monotonic()
        while True:
            left = [(i % world, e) for i, e in enumerate(missing) if not self.has(e)]
            if not left:
                return
            if time.monotonic() - said > 30:
                ranks = sorted({r for r, _ in left})
                print(f"tuner run: rank {rank} waits for {len(left)} cache entries from rank(s) "
                      f"{', '.join(map(str, ranks))} ({self.root})", file=sys.stderr, flush=True)
                said = time.monotonic()
            time.sleep(poll_s)
