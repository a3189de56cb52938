"""`full_disk.no_space`, the one helper that names a full disk for the trainer's saves and for the
export, on the errors the libraries really raise when a (tiny tmpfs) disk fills: safetensors'
SafetensorError that keeps only the words, torch.save's RuntimeError that keeps neither errno nor
words (known by the free space), DCP's CheckpointException; and None for another error while
space is left."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest
import torch
from tuner.runtime.full_disk import no_space


@pytest.fixture
def full_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)]).returncode:
        pytest.skip("mount is not permitted here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _raised(write) -> BaseException:
    try:
        write()
    except BaseException as exc:  # DCP's CheckpointException is a BaseException
        return exc
    raise AssertionError("the write did not fail")


def _named(exc: BaseException, where: Path) -> None:
    full = no_space(exc, where)
    assert isinstance(full, OSError) and full.errno == errno.ENOSPC, repr(exc)
    assert str(full) == f"[Errno 28] No space left on device: '{where}'"


def test_the_libraries_full_disk_errors_are_named(full_disk, tmp_path):
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import save_file

    big = {"t": torch.zeros(100_000)}
    safetensors_error = _raised(lambda: save_file(big, str(full_disk / "a.safetensors")))  # the export's
    _named(safetensors_error, full_disk / "exp")
    _named(safetensors_error, tmp_path)  # by its words alone, where space is left (a quota, space freed since)
    _named(_raised(lambda: torch.save(big, full_disk / "b.pt")), full_disk / "out")  # no errno, no words
    _named(_raised(lambda: dcp.save(big, checkpoint_id=str(full_disk / "dcp"), no_dist=True)), full_disk)
    _named(OSError(errno.ENOSPC, "No space left on device"), full_disk / "x")  # no file name: `where`'s


def test_another_error_with_space_left_is_not_a_full_disk(tmp_path):
    assert no_space(RuntimeError("unexpected pos 576 vs 534"), tmp_path) is None
    assert no_space(ValueError("bad shape"), tmp_path / "new") is None
    named = OSError(errno.ENOSPC, "No space left on device", "/kept")
    assert no_space(named, tmp_path) is named
