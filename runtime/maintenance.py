"""Maintenance of on-disk state that runs leave behind: DeepSpeed offload swap folders.

DeepSpeed's NVMe offload writes swap files under ``<nvme_path>/zero_stage_3/`` (parameters,
``<dtype>params/rank<N>/``) and ``<nvme_path>/zero_stage_3/optimizer/rank<N>/`` (optimizer
state). A run that dies leaves them behind, and a later run with another model or world
size must not find them. Only folders DeepSpeed creates (and tuner's marker folder) are
removed; any other file in ``nvme_path`` is left alone.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

#: Top-level folders DeepSpeed's swappers create inside the configured nvme_path.
DEEPSPEED_SWAP_DIRS = ("zero_stage_3", "zero_stage_2", "zero_stage_1")
#: Names DeepSpeed uses one level down (``zero_stage_3/<name>``).
_SWAP_CHILD = re.compile(r"^(optimizer|(fp16|fp32|bf16|float16|float32|bfloat16)params)$")
_RANK_DIR = re.compile(r"^rank\d+$")


def _only_swap_content(d: Path) -> bool:
    """True when `d` (a zero_stage_N folder) holds nothing but DeepSpeed's own layout."""
    for child in d.iterdir():
        if child.is_symlink() or not child.is_dir() or not _SWAP_CHILD.match(child.name):
            return False
        for sub in child.iterdir():
            if sub.is_symlink() or not sub.is_dir() or not _RANK_DIR.match(sub.name):
                return False
    return True


def clear_offload_cache(nvme_path: str | Path) -> list[Path]:
    """Remove stale DeepSpeed swap folders under `nvme_path`; returns what was removed.

    A ``zero_stage_N`` folder is removed only when everything in it has DeepSpeed's layout
    (``<optimizer|<dtype>params>/rank<N>/...``); a folder with anything else in it is kept
    and reported by `stale_but_kept`. A missing `nvme_path` is not an error (nothing to do).
    Call it before ranks start (it is not safe while a run is using the folder).
    """
    root = Path(nvme_path).expanduser()
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for name in DEEPSPEED_SWAP_DIRS:
        d = root / name
        if d.is_dir() and not d.is_symlink() and _only_swap_content(d):
            shutil.rmtree(d)
            removed.append(d)
    return removed


def stale_but_kept(nvme_path: str | Path) -> list[Path]:
    """Swap-like folders `clear_offload_cache` would not remove because they hold other files."""
    root = Path(nvme_path).expanduser()
    return [root / n for n in DEEPSPEED_SWAP_DIRS
            if (root / n).is_dir() and not _only_swap_content(root / n)] if root.is_dir() else []
