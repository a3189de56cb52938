"""`tuner.compiler.read.files.write_atomic`: the one writer for a file a person keeps (settings
from the wizard and `tuner import`, the wizard's recovery file). Real file systems, a real
full disk (tmpfs), no mocks."""

from __future__ import annotations

import errno
import os
import stat

import pytest
from tuner.compiler.read.files import write_atomic

from tests.reliability.rel_helpers import tiny_tmpfs


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_new_file_has_the_text_as_given_and_plain_open_permissions(tmp_path):
    path = tmp_path / "sub" / "settings.toml"
    text = "a = 1\r\nb = 'é'\n"  # line endings and non-ASCII kept as they are
    assert write_atomic(path, text) == path
    assert path.read_bytes() == text.encode("utf-8")
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~_umask()  # not mkstemp's 0o600
    assert os.listdir(path.parent) == ["settings.toml"]  # no temporary left


def test_replacing_a_file_keeps_its_permissions(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text("old\n")
    path.chmod(0o600)
    write_atomic(path, "new\n")
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_full_disk_leaves_the_old_file_whole_and_no_temporary(tmp_path):
    with tiny_tmpfs(tmp_path / "mnt", 64) as mnt:
        path = mnt / "settings.toml"
        path.write_text("old = 1\n")
        with pytest.raises(OSError) as info:
            write_atomic(path, "x" * (256 * 1024))
        assert info.value.errno == errno.ENOSPC
        assert path.read_text() == "old = 1\n"
        assert os.listdir(mnt) == ["settings.toml"]
