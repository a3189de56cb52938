"""Packages found, not listed: pyproject.toml's [tool.setuptools] package-dir maps each top-level
folder (commands/ compiler/ runtime/ tui/ schemas/, and tuner/ for the root package) to its import
name, and every folder below one with an ``__init__.py`` is a package, so a new subpackage ships
without an edit anywhere. (setuptools' own ``packages.find`` names what it finds from the folder
it searches and cannot put the mapped ``tuner.`` prefix in front; everything else stays in
pyproject.toml. tests/bench/test_gpu_acceptance.py checks the wheel.)"""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
FOLDERS: dict[str, str] = tomllib.loads((HERE / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]

setup(packages=[name + (f".{sub}" if sub else "") for name, folder in FOLDERS.items()
                for sub in ["", *find_packages(str(HERE / folder))]])
