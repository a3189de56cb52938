"""Shared fixtures. Each area has its own folder: compiler/, runtime/, services/, tui/, families/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
# Third-party inputs, copied into the repository with their provenance (tests/data/README.md).
PEER_CONFIGS = REPO / "tests" / "data" / "peer-configs"
SEEDS = REPO / "tests" / "data" / "seeds"


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch):
    """Keep tests away from the real user's caches and config (and from each other)."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("TUNER_CACHE_DIR", str(home / "cache"))
    monkeypatch.setenv("TUNER_CONFIG_DIR", str(home / "config"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def run_tuner(*args: str, cwd: Path | None = None, timeout: float = 120, env: dict | None = None,
              input: str | None = None) -> subprocess.CompletedProcess:
    """Run the real `tuner` command line in a subprocess (as a user would)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "tuner", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env, input=input)
