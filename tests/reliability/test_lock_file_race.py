"""A lock file removed by its holder's release between another process's open and its check
is looked for again, not refused (tests/reliability/test_persons_files.py's concurrent compiles
met it once in the fast tier: "has 0 hard links", then a FileNotFoundError traceback). The
removal is the real one `hold_lock(remove=True)` does on release, made at the racy moment."""

from __future__ import annotations

import os

from tuner.compiler.read import file_lock


def test_a_lock_file_removed_right_after_it_was_opened_is_taken_anew(tmp_path, monkeypatch):
    path = tmp_path / ".tuner-compile.lock"
    real_open, calls = file_lock._open, []

    def open_then_released_by_another(p):
        fd, created = real_open(p)
        if not calls:  # the first time only: the other holder's release unlinks the name now
            os.unlink(p)
        calls.append(created)
        return fd, created

    monkeypatch.setattr(file_lock, "_open", open_then_released_by_another)
    with file_lock.hold_lock(path, remove=True) as fd:
        assert (os.fstat(fd).st_ino, os.fstat(fd).st_dev) == (os.stat(path).st_ino, os.stat(path).st_dev)
    assert len(calls) == 2, "the removed file was not looked for again"
    assert not path.exists()  # released and removed, as the lock always is with remove=True
