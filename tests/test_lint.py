"""ruff and mypy on every package: every folder pyproject's `package-dir` maps (compiler/, runtime/, tui/,
commands/ (the CLI), tuner/ and schemas/)
(their settings: pyproject.toml's [tool.ruff] and [tool.mypy]). Run as part of the suite, so
plain `pytest` checks them too; a failure shows the tool's own report, one test per package.
Both are in the `test` extra.

The folders are installed as one `tuner` package (pyproject's `package-dir`: `compiler/` is
`tuner.compiler`), which mypy cannot map from the folders. So mypy reads them through a tree
of symbolic links that spells the installed layout (`.mypy_cache/tree/tuner/compiler` ->
`compiler/`, ...), built afresh on each run; its reports are given as repository paths.
mypy runs once for all packages and keeps its cache in `.mypy_cache/` (git ignores it): a
warm run takes seconds, a cold one a minute or two.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Every package in the suite: folder -> its import name under `tuner` (pyproject's `package-dir`).
PACKAGES = {folder: name for name, folder in
            tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].items()}
TREE = REPO / ".mypy_cache" / "tree"


def _run(tool: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(tool) is None:
        pytest.fail(f"{tool} is not installed: install the test extra (pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=env)


@pytest.mark.parametrize("folder", PACKAGES)
def test_ruff_accepts_the_package(folder):
    r = _run("ruff", "check", "--no-fix", "--output-format", "concise", f"{folder}/")
    assert r.returncode == 0, f"ruff check {folder}/ failed:\n{r.stdout}{r.stderr}"


def _link_tree() -> Path:
    """`.mypy_cache/tree/tuner`: the installed package's layout, made of links to the folders."""
    root = TREE / "tuner"
    if TREE.exists():
        shutil.rmtree(TREE)
    root.mkdir(parents=True)
    for entry in sorted((REPO / "tuner").iterdir()):
        if entry.name != "__pycache__":
            (root / entry.name).symlink_to(entry)
    for folder, name in PACKAGES.items():
        if folder != "tuner":
            (root / name.split(".")[1]).symlink_to(REPO / folder, target_is_directory=True)
    return root


def _repo_path(reported: str) -> str:
    """A path as mypy reports it (through the link tree) -> the repository's path."""
    rel = reported.replace("\\", "/").split(".mypy_cache/tree/tuner/", 1)[-1]
    first = rel.split("/", 1)[0]
    return rel if first in PACKAGES and first != "tuner" else f"tuner/{rel}"


@pytest.fixture(scope="module")
def mypy_report() -> dict[str, list[str]]:
    """mypy's error lines per package folder (one run over every package)."""
    _link_tree()
    import os

    env = dict(os.environ, MYPYPATH=str(TREE))
    r = _run("mypy", "-p", "tuner", env=env)  # every subpackage: the links make them part of it
    per: dict[str, list[str]] = {folder: [] for folder in PACKAGES}
    for line in r.stdout.splitlines():
        m = re.match(r"^(\S+?\.py):(\d+): (error|note): ", line)
        if not m:
            continue
        path = _repo_path(m.group(1))
        per[path.split("/", 1)[0]].append(path + line[len(m.group(1)):])
    if r.returncode not in (0, 1) or (r.returncode == 1 and not any(per.values())):
        pytest.fail(f"mypy did not run:\n{r.stdout}{r.stderr}")
    return per


@pytest.mark.parametrize("folder", PACKAGES)
def test_mypy_accepts_the_package(folder, mypy_report):
    errors = [line for line in mypy_report[folder] if ": error: " in line]
    assert not errors, f"mypy on {folder}/ failed:\n" + "\n".join(mypy_report[folder])
