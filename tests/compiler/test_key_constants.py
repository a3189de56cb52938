"""Production code names a settings key by its constant (`compiler/keys/paths.py`:
``K.FSDP_VERSION``), never by a string literal (``"fsdp.version"``), so that a key renamed in
its declaration fails mypy and import wherever it is used instead of silently matching nothing.

The contract is the exact match: a string constant whose whole text is a declared key path is
reported, wherever it sits (an argument, a dict key or value, a tuple for ``in``, a default
argument, a part of an f-string). Prose that mentions a key inside a longer message
(``"set hardware.num_processes to your GPU count"``) is not: a message is read by people, and
rewriting every sentence as an f-string of constants would make the messages harder to read
and to keep right for no check gained (the diagnostics tests pin their text). A tool's own
names in the importers' tables (``"base_model"``) are not tuner key paths and stay strings.

compiler/keys/ is exempt: it holds the declaration and the constants themselves.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from tuner.compiler.keys.paths import DECLARED

REPO = Path(__file__).resolve().parents[2]
EXEMPT = REPO / "compiler" / "keys"


def _production_folders() -> list[Path]:
    """The folders pyproject's `package-dir` maps to tuner's packages (commands/, compiler/, ...)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return [REPO / folder for folder in project["tool"]["setuptools"]["package-dir"].values()]


def literal_key_paths(source: str) -> list[tuple[int, str]]:
    """(line, key path) for every string constant in `source` that is exactly a declared key path."""
    return sorted((node.lineno, node.value) for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in DECLARED)


def test_the_check_finds_each_kind_of_literal():
    code = ('a = "fsdp.version"\n'                          # 1: an assignment
            'b = {"base_model": "model.path"}\n'            # 2: a table's value
            'c = {"data.path": 1}\n'                        # 3: a table's key
            'd = k in ("x", "hardware.num_processes")\n'    # 4: an `in` tuple
            'def f(key="training.seed"): pass\n'            # 5: a default argument
            'g = f"output.dir{suffix}"\n'                   # 6: an f-string part that is a key path
            'h = "set output.dir to a new directory"\n'     # prose: not reported
            'i = "fsdp.versions"\n'                         # not a declared key
            'j = f"{K.OUTPUT_DIR} = {v}"\n')                # the constant: not reported
    assert literal_key_paths(code) == [(1, "fsdp.version"), (2, "model.path"), (3, "data.path"),
                                       (4, "hardware.num_processes"), (5, "training.seed"), (6, "output.dir")]


def test_the_scan_covers_every_package_folder():
    folders = {p.name for p in _production_folders()}
    assert {"commands", "compiler", "runtime", "tui", "tuner"} <= folders
    assert len(DECLARED) > 100


def test_no_production_module_spells_a_key_path():
    found = [f"{path.relative_to(REPO)}:{line}: {key!r}"
             for folder in _production_folders() for path in sorted(folder.rglob("*.py"))
             if EXEMPT not in path.parents
             for line, key in literal_key_paths(path.read_text(encoding="utf-8"))]
    assert found == [], (f"{len(found)} key path(s) written as strings; use the constant from "
                         "compiler/keys/paths.py (add it there, one line, SECTION_KEY):\n" + "\n".join(found))
