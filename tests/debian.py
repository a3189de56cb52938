"""Debian packages a test needs (tmux, libaio): installed with apt-get when missing, as CI
runs as root on a fresh machine; the test is skipped, saying why, where that cannot be done."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Callable

import pytest


def ensure_package(package: str, present: Callable[[], bool], why: str) -> None:
    """Make `present()` true by installing `package`, or skip the test naming what is missing."""
    if present():
        return
    if not shutil.which("apt-get") or os.geteuid() != 0:
        pytest.skip(f"{why}: {package} is not installed and cannot be installed here (needs apt-get as root)")
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", package]):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if done.returncode != 0 and cmd[1] == "install":
            pytest.skip(f"{why}: apt-get could not install {package}: {done.stderr.strip()[-300:]}")
    if not present():
        pytest.skip(f"{why}: apt-get installed {package}, but it is still not usable")
