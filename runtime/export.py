"""Exporting a saved checkpoint as a full model that ``from_pretrained`` loads.

Works in one process, without ranks: the checkpoint's own `tuner_checkpoint.json` carries
the run's manifest (family, model, strategy), so nothing else is needed.

* DeepSpeed (any ZeRO stage): DeepSpeed's ``zero_to_fp32`` merges the partitions.
* FSDP sharded (DCP folder ``pytorch_model_fsdp_0/``): read with
  ``torch.distributed.checkpoint`` into one state dict (no process group needed).
* FSDP full (``pytorch_model_fsdp.bin``) and DDP (``model.safetensors``): already full.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from . import checkpoint as ckpt
from .artefacts import RunError


def full_state_dict(path: Path, meta: ckpt.CheckpointMeta) -> dict:
    import torch

    if meta.strategy.startswith("zero"):
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


#: Written into every export folder: which entries tuner wrote there (and from what).
EXPORT_RECORD = "tuner_export.json"
_STAGING_PREFIX = ".tuner-export-"


def export_target(out_dir: Path) -> list[str]:
    """Check `out_dir` before anything is read: it must be new, empty, or an earlier export.

    Returns the entries the earlier export wrote (the only ones this export may replace or
    remove). Anything else in the folder is the person's: tuner never deletes it, and a
    non-empty folder that is not an earlier export is refused.
    """
    shown = out_dir.resolve() if str(out_dir) in (".", "") else out_dir
    if out_dir.exists() and not out_dir.is_dir():
        raise RunError(f"--out {shown} is a file; give a directory (a new one, an empty one, or an earlier export)")
    if not out_dir.exists():
        return []
    entries = [p.name for p in out_dir.iterdir() if not p.name.startswith(_STAGING_PREFIX)]
    if not entries:
        return []
    from tuner.compiler.files import FileError, load_json

    try:
        record = load_json(out_dir / EXPORT_RECORD, "export record")
    except FileError:
        record = None
    written = record.get("entries") if isinstance(record, dict) else None
    if not isinstance(written, list) or not all(isinstance(n, str) and "/" not in n and n not in ("", ".", "..")
                                                for n in written):
        raise RunError(f"--out {shown} is not empty and is not an earlier tuner export (no valid {EXPORT_RECORD}); "
                       "tuner never deletes or overwrites files it did not write: give a new or empty directory")
    return written


def export_checkpoint(path: Path, out_dir: Path) -> Path:
    from tuner.compiler.settings import Settings

    from .families import get_family
    from .families.base import FamilyContext

    path, out_dir = Path(path), Path(out_dir)
    if not path.is_dir():
        raise RunError(f"checkpoint not found: {path}")
    previous = export_target(out_dir)  # refuse before the (slow) gathering of the state
    if path.name == ckpt.LATEST or (path / ckpt.LATEST).is_file() and not (path / ckpt.META).is_file():
        found = ckpt.latest_intact(path if path.is_dir() else path.parent)
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
    fam = get_family(meta.family)(FamilyContext(settings=settings, base_dir=base_dir, seed=settings.training.seed))
    try:
        state = full_state_dict(path, meta)
    except RunError:
        raise
    except _READ_ERRORS as exc:
        raise _damaged(path, exc) from None
    _write_export(fam, state, out_dir, previous, path)
    return out_dir


def _damaged(path: Path, exc: BaseException) -> RunError:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if any(line.startswith("Traceback") for line in lines):  # DCP's error embeds each rank's traceback
        lines = lines[-1:]  # its last line is the root cause ("FileNotFoundError: ...")
    text = " ".join(" ".join(lines).split())[:300] or type(exc).__name__
    return RunError(f"checkpoint {path} is damaged: its model state cannot be read ({type(exc).__name__}: {text})"
                    f"{ckpt.intact_hint(path, action='export')}")


def _read_errors() -> tuple[type[BaseException], ...]:
    """What reading a truncated, empty or missing state file raises, library by library."""
    import pickle

    errors: list[type[BaseException]] = [OSError, EOFError, RuntimeError, ValueError, KeyError, IndexError,
                                         TypeError, AssertionError, pickle.UnpicklingError]
    try:  # torch.distributed.checkpoint's error derives from BaseException, not Exception
        from torch.distributed.checkpoint.api import CheckpointException

        errors.append(CheckpointException)
    except ImportError:
        pass
    try:
        from safetensors import SafetensorError

        errors.append(SafetensorError)
    except ImportError:
        pass
    return tuple(errors)


_READ_ERRORS = _read_errors()


def _write_export(fam, state: dict, out_dir: Path, previous: list[str], source: Path) -> None:
    """Write the export into a staging folder inside `out_dir`, then move its entries in.

    Only entries the earlier export wrote (`previous`) are replaced or removed; a new entry
    whose name the person already uses is refused before anything is moved. A failure
    leaves no staging folder behind, and removes `out_dir` again when this call created it.
    """
    import json
    import os

    from .trainer import plain_model_init

    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    for leftover in out_dir.glob(_STAGING_PREFIX + "*"):  # from an export that was killed
        shutil.rmtree(leftover, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=out_dir))
    old = staging / ".previous"
    moved_in: list[str] = []
    try:
        model_dir = staging / "model"
        with plain_model_init():
            fam.export(state, model_dir)
        entries = sorted(p.name for p in model_dir.iterdir())
        clash = [n for n in entries if (out_dir / n).exists() and n not in previous or n == EXPORT_RECORD]
        if clash:
            raise RunError(f"{out_dir} already has {', '.join(clash)}, which tuner did not write; "
                           "give a new or empty directory")
        old.mkdir()
        for name in previous:  # the earlier export's entries step aside (kept until the end)
            if (out_dir / name).exists() or (out_dir / name).is_symlink():
                os.replace(out_dir / name, old / name)
        for name in entries:
            os.replace(model_dir / name, out_dir / name)
            moved_in.append(name)
        record = {"tool": "tuner", "checkpoint": str(source.resolve()), "entries": entries}
        tmp = staging / EXPORT_RECORD
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, out_dir / EXPORT_RECORD)
    except BaseException:
        for name in moved_in:  # take this export's entries out again ...
            target = out_dir / name
            shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink(missing_ok=True)
        if old.is_dir():  # ... and put the earlier export back
            for item in old.iterdir():
                os.replace(item, out_dir / item.name)
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    shutil.rmtree(staging, ignore_errors=True)
