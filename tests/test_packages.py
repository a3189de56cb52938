"""The guard tests walk tests/packages.py's PACKAGE_FOLDERS, read from pyproject's package-dir:
every folder of the repository that holds a Python package and is not tests/bench/scripts is
in it, so a guard cannot skip a package (a hand-kept list once skipped commands/)."""

from __future__ import annotations

from tests.packages import PACKAGE_FOLDERS, REPO

NOT_PRODUCT = {"tests", "bench", "scripts", "docs", "examples"}


def test_every_package_folder_is_walked_by_the_guards():
    on_disk = {p.parent.name for p in REPO.glob("*/__init__.py")} - NOT_PRODUCT
    assert "commands" in on_disk
    assert on_disk <= set(PACKAGE_FOLDERS), f"not in pyproject's package-dir: {sorted(on_disk - set(PACKAGE_FOLDERS))}"
