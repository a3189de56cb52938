"""The product's package folders, read from pyproject.toml's ``package-dir`` (the one list the
install uses), so that a guard test that walks "every production module" cannot miss a package
added there (a hand-kept list once missed commands/)."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: import name under `tuner` -> its folder in the repository, e.g. "tuner.commands" -> "commands"
PACKAGE_DIR: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
#: every folder of the product, in pyproject's order
PACKAGE_FOLDERS: tuple[str, ...] = tuple(PACKAGE_DIR.values())
