"""The compiler's stages are layers: each imports only the stages below it.

`LAYERS` is the order (docs/code-map.md names it too): the diagnostics every stage reports
with, the key declarations, the parsers (text -> values, no I/O), the reading, the normalising, the plan, the memory estimate, the
review of the plan against the model and the machine, the artefacts' rendering, the
importers of other tools' files, then the gather and the compile that drive them. Every
module under compiler/ belongs to exactly one layer (a new folder must be placed in the order
before it can land), and every import of one compiler module by another, at module level or
inside a function (it runs too), names a module of its own layer or of a layer below.

`import tuner.compiler.read.files` (runtime/export.py's `write_atomic`) loads only that
helper, the parsers it reads with (`compiler/parse.py`) and the package files above it: the
package files import nothing.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_import_contracts import _module_file

REPO = Path(__file__).resolve().parents[2]
COMPILER = REPO / "compiler"

#: The stages, lowest first: a folder of compiler/ or a module at its top.
LAYERS = ("__init__.py", "diagnostics.py", "keys", "parse.py", "read", "canonical", "plan", "memory", "review",
          "artefacts", "formats", "gather.py", "compile.py")


def layer_of(path: Path) -> int | None:
    """The index in LAYERS of a module under compiler/ (None: not placed)."""
    first = path.relative_to(COMPILER).parts[0]
    return LAYERS.index(first) if first in LAYERS else None


def compiler_imports(path: Path, tree: ast.AST) -> list[tuple[int, Path]]:
    """(line, compiler module) for each relative import in `tree`, read as if it were `path`."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        if node.module:
            base = base.joinpath(*node.module.split("."))
        for alias in node.names:  # `from . import x` names a module; `from .x import y`, an attribute
            target = (_module_file(base / alias.name) if alias.name != "*" else None) or _module_file(base)
            if target is not None and COMPILER in target.parents:
                out.append((node.lineno, target))
    return out


def upward(path: Path, tree: ast.AST) -> list[str]:
    """The imports in `tree` (read as `path`) of a later stage than `path`'s own."""
    mine = layer_of(path)
    assert mine is not None
    return [f"{path.relative_to(REPO)}:{line} imports {target.relative_to(REPO)} "
            f"({LAYERS[mine]} is below {LAYERS[layer_of(target) or 0]})"
            for line, target in compiler_imports(path, tree)
            if (layer_of(target) or 0) > mine]


def _modules() -> list[Path]:
    return sorted(p for p in COMPILER.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_compiler_module_is_in_a_layer():
    unplaced = sorted({p.relative_to(COMPILER).parts[0] for p in _modules() if layer_of(p) is None})
    assert not unplaced, f"compiler/{unplaced} is in no layer: add it to LAYERS (and docs/code-map.md)"


def test_no_stage_imports_a_later_stage():
    bad = [line for p in _modules() for line in upward(p, ast.parse(p.read_text(encoding="utf-8")))]
    assert not bad, "imports from an earlier stage into a later one:\n" + "\n".join(bad)


def test_the_layer_check_sees_an_upward_import():
    """Not vacuous: the lines that made the stages depend both ways before the layering, read
    in the modules that had them, are each found (keys -> canonical, read -> canonical,
    plan -> artefacts, plan -> memory), and the same import downward is not."""
    probes = {
        "keys/sections/loop.py": "from ...canonical import normalise",
        "read/inputs.py": "def f():\n    from ..canonical.normalise import normalise\n",
        "plan/rules.py": "from ..artefacts import emit",
        "plan/model.py": "from ..memory import estimate",
        "diagnostics.py": "from .keys import paths",
    }
    for where, line in probes.items():
        found = upward(COMPILER / where, ast.parse(line))
        assert len(found) == 1 and found[0].startswith(f"compiler/{where}:"), (where, found)
    assert upward(COMPILER / "canonical" / "normalise.py", ast.parse("from ..keys import paths")) == []
    assert upward(COMPILER / "compile.py", ast.parse("from .plan import rules")) == []


@pytest.mark.parametrize(("module", "most"), [("tuner.compiler.read.files", 5), ("tuner.compiler.parse", 3)])
def test_importing_a_file_helper_loads_only_that_helper(module, most):
    """read/files.py (the reader and `write_atomic`, runtime/export.py's import) loads itself,
    the parsers it reads with and the package files above it; parse.py loads itself alone."""
    code = (f"import json, sys; before = set(sys.modules); import {module}; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'tuner' and m not in before)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    loaded = json.loads(r.stdout.strip().splitlines()[-1])
    assert module in loaded and len(loaded) <= most, loaded
