"""Checkpoint layout, discovery and compatibility: small pure functions (no torch).

Layout under OUTPUT_DIR/checkpoints/::

    step-10/                 a complete checkpoint (accelerate's save_state output +
        tuner_checkpoint.json   this file, written last, before the rename)
    step-20/
    latest                   text file naming the newest complete checkpoint ("step-20")
    .tmp-step-30/            a save in progress (or one killed mid-way): never read

A save writes into ``.tmp-step-N``; after every rank has finished, rank 0 writes
`tuner_checkpoint.json`, renames the folder to ``step-N`` (atomic on one file system) and
only then replaces ``latest`` (write-to-temp + ``os.replace``). A checkpoint is therefore
complete or absent, and ``latest`` never names a partial one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .artefacts import RunError

META = "tuner_checkpoint.json"
LATEST = "latest"
_STEP_DIR = re.compile(r"^step-(\d+)$")
TMP_PREFIX = ".tmp-"


@dataclass
class CheckpointMeta:
    step: int
    strategy: str
    """The plan's strategy: ddp, single, fsdp1, fsdp2, zero1..zero3."""
    state_dict_type: str
    """sharded or full (FSDP); 'full' for DDP; 'deepspeed' for ZeRO."""
    world_size: int
    epoch: int = 0
    batches_in_epoch: int = 0
    """Micro-batches of the current epoch already consumed (the data position)."""
    tokens_seen: int = 0
    family: str = "causal_lm"
    manifest: dict[str, Any] = field(default_factory=dict)
    """The run's manifest, so a checkpoint can be exported on its own."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def checkpoints_dir(output_dir: Path) -> Path:
    return Path(output_dir) / "checkpoints"


def step_dir_name(step: int) -> str:
    return f"step-{step}"


def read_meta(ckpt: Path) -> CheckpointMeta:
    p = Path(ckpt) / META
    if not p.is_file():
        raise RunError(f"{ckpt} is not a complete tuner checkpoint (no {META})")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        return CheckpointMeta(**data)
    except (OSError, json.JSONDecodeError, TypeError) as exc:
        raise RunError(f"{p} is unreadable ({exc})") from None


def complete_checkpoints(ckdir: Path) -> list[tuple[int, Path]]:
    """(step, path) of complete checkpoints, oldest first."""
    if not ckdir.is_dir():
        return []
    out = []
    for child in ckdir.iterdir():
        m = _STEP_DIR.match(child.name)
        if m and child.is_dir() and (child / META).is_file():
            out.append((int(m.group(1)), child))
    return sorted(out)


def latest_checkpoint(ckdir: Path) -> Path | None:
    """The checkpoint `latest` names, if it is complete; else the newest complete one."""
    pointer = ckdir / LATEST
    if pointer.is_file():
        name = pointer.read_text(encoding="utf-8").strip()
        cand = ckdir / name
        if _STEP_DIR.match(name) and (cand / META).is_file():
            return cand
    done = complete_checkpoints(ckdir)
    return done[-1][1] if done else None


def resolve_resume(resume: str, output_dir: Path) -> Path | None:
    """'' -> None; 'latest' -> the latest complete checkpoint (None when there is none yet);
    a path -> that checkpoint (error when it is not a complete one)."""
    if not resume:
        return None
    if resume == "latest":
        return latest_checkpoint(checkpoints_dir(output_dir))
    p = Path(resume).expanduser()
    if not p.is_dir():
        raise RunError(f"checkpoint not found: {p}")
    read_meta(p)
    return p


def state_dict_kind(strategy: str, state_dict_type: str) -> str:
    """What a checkpoint of this strategy holds: 'deepspeed', FSDP's 'sharded'/'full', or
    'full' (DDP and single-process runs keep whole tensors)."""
    if strategy.startswith("zero"):
        return "deepspeed"
    return state_dict_type if strategy.startswith("fsdp") else "full"


def check_compatible(meta: CheckpointMeta, strategy: str, state_dict_type: str, world_size: int, ckpt: Path) -> None:
    """Refuse resuming a checkpoint written by another strategy or world size, saying how to convert."""
    convert = (f"convert it to a full model with `tuner checkpoint export {ckpt} --out DIR` and start a new run "
               f"from it (model.path = \"DIR\")")
    ds_then, ds_now = meta.strategy.startswith("zero"), strategy.startswith("zero")
    if ds_then != ds_now:
        raise RunError(f"checkpoint {ckpt} was written {'with' if ds_then else 'without'} DeepSpeed "
                       f"({meta.strategy}) and this run {'uses' if ds_now else 'does not use'} DeepSpeed ({strategy}); "
                       f"a checkpoint cannot be resumed after enabling or disabling DeepSpeed: {convert}")
    fsdp_then, fsdp_now = meta.strategy.startswith("fsdp"), strategy.startswith("fsdp")
    if meta.strategy != strategy and (fsdp_then or fsdp_now):
        raise RunError(f"checkpoint {ckpt} was written with {meta.strategy} and this run uses {strategy}; "
                       f"sharded model and optimizer states differ between them: {convert}")
    if fsdp_then and meta.state_dict_type != state_dict_type:
        raise RunError(f"checkpoint {ckpt} holds a {meta.state_dict_type} state dict and this run is compiled for "
                       f"{state_dict_type}; set checkpoint.state_dict_type = \"{meta.state_dict_type}\" to resume it, "
                       f"or {convert}")
    if meta.world_size != world_size:
        raise RunError(f"checkpoint {ckpt} was written by {meta.world_size} ranks and this run has {world_size}; "
                       f"tuner resumes only at the same world size (optimizer state, RNG and data position are "
                       f"per rank): run with hardware.num_processes = {meta.world_size}, or {convert}")


def tmp_dir_for(ckdir: Path, step: int) -> Path:
    return ckdir / f"{TMP_PREFIX}{step_dir_name(step)}"


def remove_partial(ckdir: Path) -> list[Path]:
    """Remove folders of saves that never completed (a run killed mid-save)."""
    gone = []
    if ckdir.is_dir():
        for child in ckdir.iterdir():
            if child.name.startswith(TMP_PREFIX) and child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
                gone.append(child)
    return gone


def publish(ckdir: Path, tmp: Path, meta: CheckpointMeta) -> Path:
    """Rank 0, after every rank finished writing into `tmp`: meta, rename, move `latest`."""
    (tmp / META).write_text(meta.to_json(), encoding="utf-8")
    final = ckdir / step_dir_name(meta.step)
    if final.exists():  # a re-run of the same step (resume from an earlier one)
        shutil.rmtree(final)
    os.replace(tmp, final)
    write_latest(ckdir, final.name)
    return final


def write_latest(ckdir: Path, name: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".latest.", dir=ckdir)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(name + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, ckdir / LATEST)


def prune(ckdir: Path, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` complete checkpoints (never the one `latest` names)."""
    if keep_last <= 0:
        return []
    keep_pointer = latest_checkpoint(ckdir)
    done = complete_checkpoints(ckdir)
    gone = []
    for _, path in done[:-keep_last]:
        if path != keep_pointer:
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
    return gone
