"""System packages a test needs (tmux, libaio-dev, shellcheck, Slurm): never installed by a test.

scripts/test.sh installs the missing ones up front when run as root (scripts/system-packages.sh);
elsewhere a test that needs one skips, naming the package and the command that installs it.
"""

from __future__ import annotations

from typing import Callable

import pytest


def install_command(*packages: str) -> str:
    return f"sudo apt-get install -y {' '.join(packages)} (scripts/test.sh does it when run as root)"


def require_package(package: str, present: Callable[[], bool], why: str) -> None:
    """Skip the calling test, saying what to install, unless `present()`."""
    if not present():
        pytest.skip(f"{why}: {package} is not installed; {install_command(*package.split())}")
