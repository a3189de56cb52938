"""Exporting a saved checkpoint as a full model that ``from_pretrained`` loads.

Works in one process, without ranks: the checkpoint's own `tuner_checkpoint.json` carries
the run's manifest (family, model, strategy), so nothing else is needed.

* DeepSpeed (any ZeRO stage): DeepSpeed's ``zero_to_fp32`` merges the partitions.
* FSDP sharded (DCP folder ``pytorch_model_fsdp_0/``): read with
  ``torch.distributed.checkpoint`` into one state dict (no process group needed).
* FSDP full (``pytorch_model_fsdp.bin``) and DDP (``model.safetensors``): already full.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from . import checkpoint as ckpt
from .artefacts import RunError
from .export_shards import DEFAULT_MAX_SHARD
from .families.base import Family, FamilyError
from .full_disk import no_space


def full_state_dict(path: Path, meta: ckpt.CheckpointMeta) -> dict:
    import torch

    if meta.strategy.is_deepspeed:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        return dict(get_fp32_state_dict_from_zero_checkpoint(str(path)))
    dcp_dir = path / "pytorch_model_fsdp_0"
    if dcp_dir.is_dir():
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / "full.pt"
            dcp_to_torch_save(str(dcp_dir), str(target))
            state = torch.load(target, map_location="cpu", weights_only=True)
        return state.get("model", state)
    for name in ("pytorch_model_fsdp.bin", "pytorch_model_fsdp_0.bin"):
        if (path / name).is_file():
            return torch.load(path / name, map_location="cpu", weights_only=True)
    st = path / "model.safetensors"
    if st.is_file():
        from safetensors.torch import load_file

        return load_file(str(st))
    binf = path / "pytorch_model.bin"
    if binf.is_file():
        return torch.load(binf, map_location="cpu", weights_only=True)
    raise RunError(f"{path} holds no model state tuner can read (strategy {meta.strategy})")


#: Written into every export folder: which entries tuner wrote there, with their content.
EXPORT_RECORD = "tuner_export.json"
#: The lock two exports into one folder meet at (removed when the export ends).
EXPORT_LOCK = ".tuner-export.lock"
_STAGING_PREFIX = ".tuner-export-"
#: Inside a staging folder: says tuner made it (a person's folder of the same name has none).
_STAGING_MARK = "tuner-staging.json"


def fingerprint(path: Path) -> dict | None:
    """Size and SHA-256 of a file, or of every file below a folder (by relative path); None
    for a symbolic link or a special file (never tuner's)."""
    import hashlib

    def one(p: Path) -> dict:
        h = hashlib.sha256()
        with open(p, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        return {"size": p.stat().st_size, "sha256": h.hexdigest()}

    if path.is_symlink():
        return None
    if path.is_file():
        return one(path)
    if not path.is_dir():
        return None
    tree = {}
    for p in sorted(path.rglob("*")):
        if p.is_symlink() or not (p.is_file() or p.is_dir()):
            return None
        if p.is_file():
            tree[p.relative_to(path).as_posix()] = one(p)
    return {"tree": tree}


def trusted_entries(out_dir: Path) -> list[str] | None:
    """The entries of an earlier export in `out_dir` that still hold exactly what tuner wrote
    (by the sizes and SHA-256 its record keeps); None when `out_dir` holds no valid record.
    A hand-edited record cannot make tuner replace anything else: a listed entry whose content
    differs from the record's is the person's."""
    from ..compiler.read.files import FileError, load_json

    try:
        record = load_json(out_dir / EXPORT_RECORD, "export record")
    except FileError:
        return None
    if not isinstance(record, dict) or record.get("tool") != "tuner":
        return None
    names, content = record.get("entries"), record.get("content")
    if not isinstance(names, list) or not isinstance(content, dict) or not all(
            isinstance(n, str) and n == Path(n).name and n not in ("", ".", "..", EXPORT_RECORD) for n in names):
        return None
    return [n for n in names if isinstance(content.get(n), dict) and fingerprint(out_dir / n) == content[n]]


def _is_staging(p: Path) -> bool:
    """A staging folder tuner made (a killed export's leftover): its name and its mark."""
    from ..compiler.read.files import FileError, load_json

    if not p.name.startswith(_STAGING_PREFIX) or p.is_symlink() or not p.is_dir():
        return False
    try:
        mark = load_json(p / _STAGING_MARK, "staging mark")
    except FileError:
        return False
    return isinstance(mark, dict) and mark.get("tool") == "tuner" and mark.get("staging") == p.name


def export_target(out_dir: Path) -> list[str]:
    """Check `out_dir` before anything is read: it must be new, empty, or an earlier export.

    Returns the entries the earlier export wrote and that still hold what it wrote (the only
    ones this export may replace or remove). Anything else in the folder is the person's:
    tuner never deletes it, and a non-empty folder that is not an earlier export is refused.
    """
    shown = out_dir.resolve() if str(out_dir) in (".", "") else out_dir
    if out_dir.is_symlink() and not out_dir.exists() or out_dir.exists() and not out_dir.is_dir():
        raise RunError(f"--out {shown} is a file; give a directory (a new one, an empty one, or an earlier export)")
    if not out_dir.exists():
        return []
    entries = [p.name for p in out_dir.iterdir() if p.name != EXPORT_LOCK and not _is_staging(p)]
    if not entries:
        return []
    trusted = trusted_entries(out_dir)
    if trusted is None:
        raise RunError(f"--out {shown} is not empty and is not an earlier tuner export (no valid {EXPORT_RECORD}); "
                       "tuner never deletes or overwrites files it did not write: give a new or empty directory")
    return trusted


@contextlib.contextmanager
def export_lock(out_dir: Path) -> Iterator[None]:
    """Hold `out_dir`'s export lock (creating `out_dir`): a second export into it at once is
    refused. A failure removes `out_dir` again only when this export created it and it is
    empty (never another export's files)."""
    from ..compiler.read.file_lock import LockHeld, LockRefused, hold_lock

    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    ok = False
    try:
        try:
            with hold_lock(out_dir / EXPORT_LOCK, remove=True):
                yield
                ok = True
        except LockHeld as exc:
            raise RunError(f"another tuner export is writing {out_dir} ({exc.holder}); wait for it to finish, "
                           "or give another --out directory") from None
        except LockRefused as exc:
            raise RunError(exc.strerror or str(exc)) from None
    finally:
        if created and not ok:
            with contextlib.suppress(OSError):
                out_dir.rmdir()  # only when empty


def export_checkpoint(path: Path, out_dir: Path, max_shard_size: int | str = DEFAULT_MAX_SHARD) -> Path:
    path, out_dir = Path(path), Path(out_dir)
    ckpt.refuse_link_loop(path, "checkpoint", hint=ckpt.intact_hint(path, "export") if path.parent.is_dir() else "")
    if path.name == ckpt.LATEST and path.is_file() and path.parent.is_dir():
        path = path.parent  # `latest` itself: the checkpoint it names
    if not path.is_dir():
        raise RunError(f"checkpoint not found: {path}")
    if out_dir.is_symlink() and not out_dir.exists() or out_dir.exists() and not out_dir.is_dir():
        export_target(out_dir)  # refused: a file
    with export_lock(out_dir):
        previous = export_target(out_dir)  # refuse before the (slow) reading of the state
        _export_locked(path, out_dir, previous, max_shard_size)
    return out_dir


def _export_locked(path: Path, out_dir: Path, previous: list[str], max_shard_size: int | str) -> None:
    from ..compiler.keys.settings import Settings
    from .families import get_family
    from .families.base import FamilyContext

    pointer = path / ckpt.LATEST
    if path.name == ckpt.LATEST or (pointer.is_file() or pointer.is_symlink()) and not (path / ckpt.META).is_file():
        found = ckpt.latest_intact(path if path.is_dir() else path.parent, action="export")
        if found is None:
            raise RunError(f"no complete checkpoint in {path}")
        path = found
    meta = ckpt.read_meta(path, action="export")  # refuses a damaged one, naming the last intact one
    manifest = meta.manifest or {}
    if "settings" not in manifest:
        raise RunError(f"{path / ckpt.META} carries no run manifest; cannot tell which model it holds")
    settings = Settings.from_dict(manifest["settings"])
    # The trainer records the project directory beside the manifest (whose settings_file is
    # relative to the build directory, which a checkpoint does not know).
    base_dir = Path(manifest["project_dir"]) if manifest.get("project_dir") else path.resolve().parent
    fam = get_family(meta.family)(FamilyContext(settings=settings, base_dir=base_dir, seed=settings.training.seed,
                                                extra={"max_shard_size": max_shard_size}))

    def write(target: Path) -> None:
        try:
            if streamed(fam, path, meta, target, max_shard_size):
                return
            state = full_state_dict(path, meta)
        except (RunError, FamilyError):
            raise
        except ckpt.read_errors() as exc:  # evaluated only when an error arrives: no torch import here
            raise ckpt.unreadable(path, exc, action="export") from None
        fam.export(state, target)

    write_export(write, out_dir, previous, str(path.resolve()))


def streamed(fam: Family, path: Path, meta: ckpt.CheckpointMeta, target: Path, max_shard_size: int | str) -> bool:
    """Write the export shard by shard from the checkpoint's files when the family can
    (`export_sources.py`, `export_zero.py`, `export_shards.py`); False when it cannot: the full state is read."""
    from .export_shards import give_freed_memory_back
    from .export_sources import open_source
    from .export_zero import open_zero

    if not fam.streams_export:
        return False
    give_freed_memory_back()  # before the reader: DeepSpeed's frees what it does not keep
    source = open_zero(path) if meta.strategy.is_deepspeed else open_source(path)
    if source is None:
        return False
    if fam.export_streamed(source, target, max_shard_size):
        return True
    shutil.rmtree(target, ignore_errors=True)  # anything written before it knew
    return False


def export_model_dir(write: Callable[[Path], None], out_dir: Path, source: str) -> None:
    """The run's own export (``OUTPUT/final``): the same rules as `tuner checkpoint export`
    (only entries an earlier export wrote are replaced; a file of the person's there is kept)."""
    with export_lock(out_dir):
        write_export(write, out_dir, export_target(out_dir), source)


def write_export(write: Callable[[Path], None], out_dir: Path, previous: list[str], source: str) -> None:
    """`write(folder)` the model into a staging folder inside `out_dir`, then move its entries in.

    Only entries the earlier export wrote (`previous`) are replaced or removed; a new entry
    whose name the person already uses is refused before anything is moved. A failure
    leaves no staging folder behind. The caller holds `export_lock`.
    """
    import json
    import os

    from ..compiler.read.files import give_new_file_modes, write_atomic

    for leftover in out_dir.iterdir():  # from an export that was killed (tuner's mark inside)
        if _is_staging(leftover):
            shutil.rmtree(leftover, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=out_dir))
    old = staging / ".previous"
    moved_in: list[str] = []
    try:
        (staging / _STAGING_MARK).write_text(json.dumps({"tool": "tuner", "staging": staging.name}), encoding="utf-8")
        model_dir = staging / "model"
        with plain_model_init():
            try:
                write(model_dir)
            except Exception as exc:
                full = no_space(exc, out_dir)
                if full is None:
                    raise
                raise full from None
        give_new_file_modes(model_dir)  # safetensors writes through a private temporary (0600)
        entries = sorted(p.name for p in model_dir.iterdir())
        clash = [n for n in entries if (out_dir / n).exists() or (out_dir / n).is_symlink()
                 if n not in previous or n in (EXPORT_RECORD, EXPORT_LOCK)]
        if clash:
            raise RunError(f"{out_dir} already has {', '.join(clash)}, which tuner did not write (or which changed "
                           "since it did); give a new or empty directory, or move them away")
        old.mkdir()
        for name in previous:  # the earlier export's entries step aside (kept until the end)
            if (out_dir / name).exists() or (out_dir / name).is_symlink():
                os.replace(out_dir / name, old / name)
        for name in entries:
            os.replace(model_dir / name, out_dir / name)
            moved_in.append(name)
        record = {"tool": "tuner", "checkpoint": source, "entries": entries,
                  "content": {n: fingerprint(out_dir / n) for n in entries}}
        write_atomic(out_dir / EXPORT_RECORD, json.dumps(record, indent=2) + "\n")
    except BaseException:
        for name in moved_in:  # take this export's entries out again ...
            target = out_dir / name
            shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink(missing_ok=True)
        if old.is_dir():  # ... and put the earlier export back
            for item in old.iterdir():
                os.replace(item, out_dir / item.name)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def plain_model_init():
    """Build models without DeepSpeed's ZeRO-3 `zero.Init` (which transformers applies while a
    ZeRO-3 config is registered): export runs on rank 0 alone, and a partitioned init would
    wait forever for the other ranks."""
    try:
        from transformers.integrations import deepspeed as hf_ds
    except ImportError:
        yield
        return
    saved = hf_ds._hf_deepspeed_config_weak_ref
    hf_ds._hf_deepspeed_config_weak_ref = None
    try:
        yield
    finally:
        hf_ds._hf_deepspeed_config_weak_ref = saved
