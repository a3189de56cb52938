"""The command line of `tuner checkpoint export | inspect | verify` (the parser only; commands/checkpoint.py runs it)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def shard_size(text: str) -> int | str:
    """argparse type: bytes (``1000000``) or a size with huggingface_hub's units (``5GB``, ``500MB``,
    ``KB``, ``TB``: powers of 1000), as ``save_pretrained``'s ``max_shard_size`` takes it."""
    import re

    t = text.strip()
    if re.fullmatch(r"[1-9]\d*", t):
        return int(t)
    if re.fullmatch(r"\d+(\.\d+)?\s*[KMGT]B", t, flags=re.IGNORECASE) and float(re.sub(r"[^\d.]", "", t)) > 0:
        return t
    raise argparse.ArgumentTypeError(f"{text!r} is not a size: write bytes (1000000) or a number with KB, MB, GB "
                                     "or TB (5GB)")


def add_checkpoint_parser(sub, nonempty_path: Callable[[str], Path]) -> None:
    """Add `tuner checkpoint ACTION ...` to the command line's subparsers."""
    p = sub.add_parser("checkpoint", help="checkpoint tools")
    csub = p.add_subparsers(dest="checkpoint_command", metavar="ACTION")
    e = csub.add_parser("export", help="export a checkpoint as a full model that from_pretrained loads")
    e.add_argument("checkpoint", type=Path)
    e.add_argument("--out", type=nonempty_path, required=True,
                   help="a new or empty directory, or one an earlier export wrote (its other files are kept)")
    e.add_argument("--max-shard-size", type=shard_size, default="5GB",
                   help="the largest safetensors file (default 5GB); a larger model is written as "
                        "model-0000N-of-0000M.safetensors + model.safetensors.index.json, one shard in memory at a time")
    i = csub.add_parser("inspect", help="what a checkpoint holds (step, strategy, data position, sizes) and "
                                        "what it resumes into")
    i.add_argument("checkpoint", type=Path)
    i.add_argument("--json", action="store_true")
    v = csub.add_parser("verify", help="check that a resumed run continues its reference run's training "
                                       "(losses and parameters at the same steps)")
    v.add_argument("reference", type=Path, help="the uninterrupted run's output directory")
    v.add_argument("resumed", type=Path, help="the resumed run's output directory")
    v.add_argument("--loss-rtol", type=float, default=None, help="relative tolerance of the losses (default 1e-4)")
    v.add_argument("--param-rtol", type=float, default=None,
                   help="tolerance of each parameter tensor, relative to its largest value (default 1e-4)")
    v.add_argument("--json", action="store_true")
