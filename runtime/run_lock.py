"""One run per output directory: a lock that dies with the run, and the rule for a
directory that already holds a run.

Two `tuner run` into the same output directory would interleave their metrics and mix
their checkpoints. `acquire_run_lock` takes a ``fcntl.flock`` on ``OUTPUT/.tuner-run.lock``
for as long as the run lasts (`tuner.compiler.read.file_lock`: never through a symbolic link, never
into a person's file). The kernel drops a flock when the process holding it exits, however it
exits (kill -9 included), so a dead run never leaves the directory locked; the file itself
stays, and only says who held it last.

The lock is per output directory, whatever the build's shape: a one-machine run holds it
exclusively; each machine of a job of several machines holds it shared (the machines of one
job share the directory: a shared file system, or machines simulated on one host) plus its
own ``.tuner-run.machineN.lock`` exclusively. So a one-machine run and a job of several
machines never write into one directory at once, nor two launchers of one machine.

`check_output_dir`: an output directory that already holds a run (``metrics.jsonl``,
``checkpoints/``, ``final/``, ...) is resumed when asked (``--resume latest``, or
``checkpoint.resume = "auto"``) and refused otherwise: tuner never silently replaces or
appends to an earlier run. A ``final/`` or ``checkpoints/step-N`` that tuner did not write
(``output.dir = "."`` in a project folder) is refused either way.

Taking the lock is also the first write into the output directory, so an output directory
that cannot be created or written is refused here, before any rank starts.

No torch import: `tuner run` checks this before it starts anything heavy.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from .artefacts import RunError

LOCK_FILE = ".tuner-run.lock"
#: What a run writes into its output directory (besides the lock).
RUN_ENTRIES = ("metrics.jsonl", "checkpoints", "final", "tensorboard", "validation")


@contextlib.contextmanager
def acquire_run_lock(output_dir: str | os.PathLike, machine_rank: int | None = None) -> Iterator[Path]:
    """Hold the output directory's run lock for the duration of the ``with`` block.

    `machine_rank`: for a job of several machines, each machine's launcher holds the
    directory's lock shared and its machine's lock (``.tuner-run.machine1.lock``)
    exclusively; None (one machine) holds the directory's lock exclusively.

    Raises RunError (exit 2) when another live run holds it, or when the directory cannot
    be created or written (read-only, not a directory, no space), or when the lock's name
    is taken by a link or a person's file.
    """
    from ..compiler.read.file_lock import LockHeld, LockRefused, hold_lock, write_holder

    output_dir = Path(output_dir)
    path = output_dir / LOCK_FILE
    with contextlib.ExitStack() as stack:
        try:
            output_dir.mkdir(parents=True, exist_ok=True)
            fd = stack.enter_context(hold_lock(path, shared=machine_rank is not None))
            if machine_rank is None:
                write_holder(fd)
            else:
                path = output_dir / f".tuner-run.machine{machine_rank}.lock"
                write_holder(stack.enter_context(hold_lock(path)), machine_rank=machine_rank)
        except LockHeld as exc:
            holder = exc.holder if exc.holder != "its holder is unknown" else "a job of several machines"
            raise RunError(f"another tuner run is using {output_dir} ({holder}); wait for it to finish, "
                           "stop it, or set output.dir to another directory") from None
        except LockRefused as exc:
            raise RunError(f"{exc.strerror}; or set output.dir to another directory") from None
        except OSError as exc:
            raise RunError(_unwritable(output_dir, exc)) from None
        yield path


def not_written_by_tuner(output_dir: Path) -> list[str]:
    """Entries at the names a run writes that tuner did not write: a ``final/`` that is no
    tuner export, a ``checkpoints/step-N`` that is no tuner checkpoint. (Other files of the
    person's there are left alone and need not move.)"""
    from . import checkpoint as ckpt
    from .export import trusted_entries

    found = []
    final = output_dir / "final"
    if (final.exists() or final.is_symlink()) and (not final.is_dir() or final.is_symlink()
                                                    or trusted_entries(final) is None and any(final.iterdir())):
        found.append(str(final))
    ckdir = ckpt.checkpoints_dir(output_dir)
    if ckdir.is_symlink() or ckdir.exists() and not ckdir.is_dir():
        found.append(str(ckdir))
    elif ckdir.is_dir():
        found += [str(c) for c in sorted(ckdir.iterdir()) if re.fullmatch(r"step-\d+", c.name)
                  and (c.is_symlink() or not (c / ckpt.META).is_file())]
    return found


def earlier_run(output_dir: Path) -> list[str]:
    """What an earlier run left in `output_dir` (names of `RUN_ENTRIES` present)."""
    return [n for n in RUN_ENTRIES if (output_dir / n).exists() or (output_dir / n).is_symlink()]


def check_output_dir(output_dir: Path, resume: str, build_hint: str = "BUILD_DIR") -> str:
    """Apply the output-directory rule before any rank starts; returns the resume value the
    ranks get ('' for a fresh start, 'latest', or a checkpoint path)."""
    from . import checkpoint as ckpt

    output_dir = Path(output_dir)
    foreign = not_written_by_tuner(output_dir)
    if foreign:
        raise RunError(f"{', '.join(foreign)} {'was' if len(foreign) == 1 else 'were'} not written by tuner; a run "
                       f"would replace {'it' if len(foreign) == 1 else 'them'} and tuner never touches files it did "
                       "not write: move them away, or set output.dir to a new directory")
    present = earlier_run(output_dir)
    if resume == "auto":
        resume = "latest" if present else ""
    if not present or (resume and resume != "latest"):
        return resume
    listed = ", ".join(f"{n}/" if (output_dir / n).is_dir() else n for n in present)
    if not resume:
        raise RunError(f"{output_dir} already holds a run ({listed}); tuner never replaces or appends to it "
                       f"silently: continue it with `tuner run {build_hint} --resume latest` (or set "
                       "checkpoint.resume = \"auto\" in the settings), or set output.dir to a new directory")
    if ckpt.latest_intact(ckpt.checkpoints_dir(output_dir)) is None:
        raise RunError(f"{output_dir} already holds a run ({listed}) but no checkpoint to resume from; a new run "
                       "there would replace it: set output.dir to a new directory, or move its files away")
    return resume


def _unwritable(output_dir: Path, exc: OSError) -> str:
    from ..compiler.read.files import describe_os_error

    return (f"output directory {output_dir} is not usable: {describe_os_error(exc)}; "
            "fix its permissions or free space, or set output.dir to a writable directory")
