"""The build a run reads: its own copy, never a ``build/`` another run may replace.

Two `tuner run` started from one folder compile into the same ``build/``. If the ranks read
``build/`` when they start (seconds after their launcher compiled it), the first run's ranks
read the second run's build: the other settings, the other output directory, past the first
run's output lock. So a run never hands ``build/`` to its ranks:

1. `tuner run settings.toml` keeps the artefacts it compiled (in memory); `tuner run BUILD_DIR`
   reads the build's files once, each whole, and checks them against the manifest's digests
   (a build half-replaced by a concurrent compile is read again, then refused).
2. Once the run holds its output directory's lock, those exact bytes are written to
   ``OUTPUT/.tuner-build/`` (``.tuner-build.machineN/`` for one machine of a job of several),
   and the ranks read that copy. Only the lock holder writes there, so no other run replaces
   it while this one trains; it stays afterwards as the record of what the run trained.

The copy's manifest names the settings file by absolute path, so relative paths in the
settings still resolve against the project directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..compiler.artefacts.emit import ACCELERATE_YAML, DEEPSPEED_JSON
from ..compiler.artefacts.emit import MANIFEST_JSON as MANIFEST
from .artefacts import Artefacts, RunError, load

#: The files a run's ranks read.
RUN_FILES = (MANIFEST, ACCELERATE_YAML, DEEPSPEED_JSON)
COPY_DIR = ".tuner-build"
#: What a copy's manifest records (the build a run was started from).
SOURCE_KEY = "run_build_source"


def copy_name(machine_rank: int | None) -> str:
    return COPY_DIR if machine_rank is None else f"{COPY_DIR}.machine{machine_rank}"


def read_build(build_dir: Path, attempts: int = 3) -> dict[str, bytes]:
    """The run's files of `build_dir`, read once and consistent with its manifest's digests.

    A build another compile is replacing file by file is read again (up to `attempts` times),
    then refused naming the folder."""
    build_dir = Path(build_dir)
    load(build_dir)  # the build's own checks, with their messages (missing, damaged, edited)
    for _ in range(attempts):
        files = {}
        for name in RUN_FILES:
            with contextlib.suppress(FileNotFoundError):
                files[name] = (build_dir / name).read_bytes()
        if consistent(files):
            return files
    raise RunError(f"{build_dir} changed while tuner run read it (another `tuner compile` or `tuner run` is "
                   "writing it); wait for it to finish, or compile into another folder "
                   "(`tuner compile SETTINGS --out OTHER`) and run that")


def consistent(files: dict[str, bytes]) -> bool:
    """Whether the artefacts are the ones the manifest records (one compile's, not a mix)."""
    try:
        recorded = json.loads(files[MANIFEST]).get("artefacts") or {}
    except (KeyError, ValueError, AttributeError):
        return False
    for name in (ACCELERATE_YAML, DEEPSPEED_JSON):
        if name in recorded and (name not in files or hashlib.sha256(files[name]).hexdigest() != recorded[name]):
            return False
    return True


def pinned(files: dict[str, bytes], build_dir: Path) -> dict[str, bytes]:
    """`files` with the manifest naming the settings file by absolute path (the copy lives
    elsewhere) and the build it came from."""
    manifest = json.loads(files[MANIFEST])
    build_dir = Path(build_dir).resolve()
    sf = manifest.get("settings_file")
    # base_dir is the settings file's folder, or the build's parent when there is none
    manifest["settings_file"] = str((build_dir / sf).resolve()) if sf else str(build_dir)
    manifest[SOURCE_KEY] = str(build_dir)
    return {**files, MANIFEST: (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8")}


@contextlib.contextmanager
def staged(files: dict[str, bytes]) -> Iterator[Artefacts]:
    """The artefacts of `files`, loaded (and checked) from a private temporary folder: what
    the run learns before it holds its output lock (the output directory, the strategy)."""
    with tempfile.TemporaryDirectory(prefix="tuner-run-build-") as tmp:
        _write(Path(tmp), files)
        yield load(Path(tmp))


def freeze(files: dict[str, bytes], output_dir: Path, machine_rank: int | None) -> Artefacts:
    """Write the run's copy into its output directory (the caller holds the output lock) and
    load it: the only build the ranks see."""
    target = Path(output_dir) / copy_name(machine_rank)
    if target.is_symlink() or target.exists() and not (target / MANIFEST).is_file():
        raise RunError(f"{target} is not tuner's copy of a build (tuner writes it there for each run); "
                       "move it away, or set output.dir to another directory")
    tmp = Path(tempfile.mkdtemp(prefix=f"{target.name}.", suffix=".tmp", dir=output_dir))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 is for the staging only
        _write(tmp, files)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return load(target)


def _write(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).write_bytes(data)
