"""Shared helpers for the reliability tests: in-process `tuner`, the documented exit codes."""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def documented_exit_codes() -> set[int]:
    """The codes in the README's exit-code table (the contract a pipeline relies on)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(m) for m in re.findall(r"^\| (\d+) \|", section, flags=re.M)}


def tuner(*argv: str, timeout_s: int = 60) -> tuple[int, str, str]:
    """`tuner ARGV` in this process (fast: no interpreter start): (exit code, stdout, stderr).

    A SIGALRM bounds it, so a command that would block (a FIFO read) fails the test instead
    of hanging the suite.
    """
    from tuner.commands.cli import main

    out, err = io.StringIO(), io.StringIO()

    def _timeout(signum, frame):
        raise TimeoutError(f"tuner {' '.join(argv)} did not finish in {timeout_s} s")

    previous = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(timeout_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in argv])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return code, out.getvalue(), err.getvalue()


def rank_lines() -> int:
    """Rank processes started so far by this pytest process's tests (tests/tiers.py's counter)."""
    try:
        return len(Path(os.environ["TUNER_TEST_RANK_LOG"]).read_text(encoding="utf-8").splitlines())
    except (KeyError, OSError):
        return 0


def refused_before_launch(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """`tuner ARGV` in this process, from `cwd`, for a refusal the product makes before any rank
    starts: asserts that no rank started (so the test needs no launch to show it) and returns
    (returncode, stdout, stderr) as a subprocess run would."""
    before = rank_lines()
    with contextlib.chdir(cwd):
        code, out, err = tuner(*map(str, argv), timeout_s=300)
    assert rank_lines() == before, f"tuner {' '.join(map(str, argv))} started ranks before refusing:\n{err[-3000:]}"
    return subprocess.CompletedProcess(["tuner", *map(str, argv)], code, out, err)


def assert_honest(code: int, out: str, err: str, argv=()) -> None:
    """No traceback, no internal error, a documented exit code."""
    from tuner.compiler.diagnostics import EXIT_INTERNAL

    text = out + err
    assert "Traceback (most recent call last)" not in text, (argv, text[-2000:])
    assert code != EXIT_INTERNAL, (argv, text[-2000:])
    assert code in DOCUMENTED, (argv, code, text[-2000:])


DOCUMENTED = documented_exit_codes()


@contextlib.contextmanager
def tiny_tmpfs(where: Path, kib: int):
    """A tmpfs of `kib` KiB mounted at `where` (root only; the test is skipped otherwise):
    a real full disk for the write paths."""
    import pytest

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(where)]).returncode:
        pytest.skip("mount is not permitted here")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)])
