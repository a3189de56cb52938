"""ruff and mypy on `compiler/`, the pure config compiler (their settings: pyproject.toml's
[tool.ruff] and [tool.mypy]). Run as part of the suite, so plain `pytest` checks them too;
a failure shows the tool's own report. Both are in the `test` extra.

mypy keeps its cache in `.mypy_cache/` (git ignores it): a warm run takes about a second.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(tool) is None:
        pytest.fail(f"{tool} is not installed: install the test extra (pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_ruff_accepts_the_compiler():
    r = _run("ruff", "check", "--no-fix", "--output-format", "concise", "compiler/")
    assert r.returncode == 0, f"ruff check compiler/ failed:\n{r.stdout}{r.stderr}"


def test_mypy_accepts_the_compiler():
    r = _run("mypy", "compiler/")
    assert r.returncode == 0, f"mypy compiler/ failed:\n{r.stdout}{r.stderr}"
