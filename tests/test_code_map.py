"""docs/code-map.md stays true: every folder and file it names exists, a file named alone in
a table row lies under that row's folder, and every package folder of the compiler and the
runtime is on the map."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAP = (REPO / "docs" / "code-map.md").read_text(encoding="utf-8")
NAMED = re.findall(r"`([^`\s]+)`", MAP)


def test_every_path_the_map_names_exists():
    # a lone `name/` is a folder of its table row (the next test)
    paths = [p for p in NAMED if "/" in p and not re.fullmatch(r"\w+/", p)]
    assert len(paths) > 30
    missing = [p for p in paths if not (REPO / p).exists()]
    assert not missing, f"docs/code-map.md names what does not exist: {missing}"


def test_a_file_named_in_a_row_is_in_that_rows_folder():
    missing = []
    for row in (line for line in MAP.splitlines() if line.startswith("| `")):
        names = re.findall(r"`([^`\s]+)`", row)
        folder = REPO / names[0]
        folder = folder if folder.is_dir() else folder.parent
        missing += [f"{names[0]}: {n}" for n in names[1:]
                    if re.fullmatch(r"[\w/]+\.py|[\w]+/", n) and not list(folder.rglob(n.rstrip("/")))]
    assert not missing, f"docs/code-map.md puts these in a folder that lacks them: {missing}"


def test_every_package_folder_is_on_the_map():
    folders = {p.parent.relative_to(REPO).as_posix() + "/" for top in ("compiler", "runtime")
               for p in (REPO / top).glob("*/__init__.py")}
    assert folders and not folders - set(NAMED), f"folders missing from docs/code-map.md: {folders - set(NAMED)}"
