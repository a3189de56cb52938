"""Carry a ZeRO checkpoint to another world size: DeepSpeed's universal checkpoint, on the fly.

A ZeRO checkpoint keeps each rank's partition of the optimizer state (and under ZeRO-3 of the
parameters) in its own file, cut for the world size that wrote it; DeepSpeed refuses to load
it at another ("Automatic adjustment of ZeRO's optimizer state partitioning with a new world
size is not currently supported"). DeepSpeed's own answer is the *universal checkpoint*: its
``ds_to_universal`` merges the partitions into one folder per parameter, by full name
(``zero/<name>/fp32.pt``, ``exp_avg.pt``, ``exp_avg_sq.pt``, ``step.pt``), and an engine with
``checkpoint.load_universal`` re-partitions them for its own world size on load.

`tuner run --resume` does this before any rank starts, when a ZeRO run resumes a ZeRO
checkpoint written by another world size: the converted checkpoint is written once beside
the run's own (``OUTPUT/checkpoints/universal-step-N/``, never taken for ``latest``) and
reused by a later resume of the same checkpoint.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from ..compiler.plan.strategy import Strategy
from . import checkpoint as ckpt
from .artefacts import RunError

#: `CheckpointMeta.state_dict_type` of a checkpoint whose DeepSpeed part is universal.
UNIVERSAL: ckpt.HeldState = "universal"
#: The DeepSpeed tag accelerate saves under (``save_checkpoint(dir, "pytorch_model")``).
DS_TAG = "pytorch_model"


def needs_universal(meta: ckpt.CheckpointMeta, strategy: Strategy, world_size: int) -> bool:
    """A ZeRO checkpoint resumed at another world size or ZeRO stage, or under another backend
    (which reads the universal form's per-parameter files: portable_state.py)."""
    return (meta.strategy.is_deepspeed and meta.state_dict_type != UNIVERSAL
            and (not strategy.is_deepspeed or meta.world_size != world_size or meta.strategy != strategy))


def universal_dir(output_dir: Path, meta: ckpt.CheckpointMeta) -> Path:
    return ckpt.checkpoints_dir(output_dir) / f"universal-step-{meta.step}"


def to_universal(src: Path, dest: Path) -> Path:
    """Write `dest`: `src` with its DeepSpeed folder converted by DeepSpeed's ``ds_to_universal``
    (the scheduler, sampler and RNG files copied as they are). Written into a temporary folder
    and renamed, so `dest` is complete or absent; an existing complete `dest` of the same
    checkpoint is reused."""
    meta = ckpt.read_meta(src)
    if (dest / ckpt.META).is_file() and ckpt.meta_problem(dest) is None:
        done = ckpt.read_meta(dest)
        if done.step == meta.step and done.state_dict_type == UNIVERSAL:
            return dest
    if dest.exists() or dest.is_symlink():
        raise RunError(f"{dest} is in the way of the universal conversion of {src}; move it away")
    tmp = dest.parent / f".tmp-{dest.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for item in src.iterdir():
            if item.name not in (DS_TAG, ckpt.META) and item.is_file():
                shutil.copy2(item, tmp / item.name)
        _ds_to_universal(src / DS_TAG, tmp / DS_TAG)
        from ..compiler.read.files import give_new_file_modes

        give_new_file_modes(tmp)
        record = replace(meta, state_dict_type=UNIVERSAL, files=ckpt.file_sizes(tmp))
        (tmp / ckpt.META).write_text(record.to_json(), encoding="utf-8")
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _ds_to_universal(src: Path, dest: Path) -> None:
    import argparse
    import contextlib
    import io

    from deepspeed.checkpoint import ds_to_universal

    args = argparse.Namespace(input_folder=str(src), output_folder=str(dest), num_extract_workers=1,
                              num_merge_workers=1, keep_temp_folder=False, strict=True,
                              inject_missing_state=True)  # the universal_checkpoint_info a plain model lacks
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # its progress
        try:
            ds_to_universal.main(args)
        except (OSError, RuntimeError, ValueError, KeyError, AssertionError) as exc:
            raise RunError(f"DeepSpeed's universal conversion of {src} failed ({type(exc).__name__}: {exc})") from None
