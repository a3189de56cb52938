"""The layout and the layering, checked on the source (the import-linter idea, without the dependency).

Inside the package folders (commands/ compiler/ runtime/ tui/ schemas/) every import of tuner's
own code is relative, and its dotted path is also its file path: `from ..compiler.read.files
import write_atomic` in runtime/x.py is the file ../compiler/read/files.py. So these checks
resolve imports on the file system, with no knowledge of pyproject's package-dir mapping:

* every import of tuner's own code is relative and names a file or folder that exists;
* no import cycle between modules (imports inside functions count: they run too);
* no shim: no module whose body only re-exports what it imports;
* the compiler imports nothing of tuner's runtime or wizard, and none of the heavy packages
  at module level or inside functions (tests/compiler/test_contracts.py checks at run time
  that `tuner compile` loads none of them; this checks every code path, not one run), with no
  exception: what asks accelerate and DeepSpeed themselves lives outside the compiler
  (`runtime/verify.py`, which `tuner compile --verify` runs in a subprocess;
  `scripts/deepspeed_rules_gen.py`, which derives schemas/deepspeed_rules.json);
* the wizard reaches the runtime only through `tui/services.py`.

tuner/ holds only the root package (`__init__.py`, `__main__.py`, which imports the CLI by its
absolute name); tests/, bench/ and scripts/ import the installed package by absolute names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("commands", "compiler", "runtime", "tui", "schemas")
HEAVY = ("torch", "accelerate", "deepspeed", "textual", "transformers", "diffusers", "peft")


def _modules(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (REPO / f).rglob("*.py") if "__pycache__" not in p.parts)


def _module_file(base: Path) -> Path | None:
    """The module file a path without suffix names: base.py, or base/__init__.py."""
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _targets(path: Path, node: ast.ImportFrom) -> list[tuple[str, Path | None]]:
    """(what the line says, the file it names or None) for each name of a relative import."""
    base = path.parent
    for _ in range(node.level - 1):
        base = base.parent
    if node.module:
        base = base.joinpath(*node.module.split("."))
    said = "." * node.level + (node.module or "")
    out = []
    for alias in node.names:  # `from . import files` names a module; `from .files import x`, an attribute
        sub = _module_file(base / alias.name) if alias.name != "*" else None
        out.append((f"from {said} import {alias.name}", sub or _module_file(base)))
    return out


def _imports(path: Path) -> tuple[set[str], set[Path], list[str]]:
    """(absolute modules imported, tuner files imported, lines that break the layout)."""
    absolute: set[str] = set()
    files: set[Path] = set()
    bad: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            absolute |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            absolute.add(node.module or "")
        elif isinstance(node, ast.ImportFrom):
            for said, target in _targets(path, node):
                if target is None or REPO not in target.parents or target.parent == REPO:
                    bad.append(f"line {node.lineno}: `{said}` names no file of the repository")
                else:
                    files.add(target)
    bad += [f"`import {m}`: tuner's own code is imported relatively here" for m in sorted(absolute)
            if m.split(".")[0] == "tuner"]
    return absolute, files, bad


GRAPH = {path: _imports(path) for path in _modules(*PACKAGES)}


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def test_every_import_of_tuners_own_code_is_relative_and_names_a_file():
    bad = {_rel(p): lines for p, (_, _, lines) in GRAPH.items() if lines}
    assert not bad, f"imports that do not name a file: {bad}"


def test_the_layout_check_sees_a_wrong_import(tmp_path):
    """Not vacuous: an absolute import of tuner, and a relative path that is no file, are both found."""
    probe = tmp_path / "probe.py"
    probe.write_text("from tuner.compiler import x\nfrom ..compiler.files import write_atomic\n")
    bad = _imports(probe)[2]
    assert len(bad) == 2 and "names no file" in bad[0] and "`import tuner.compiler`" in bad[1]
    where = REPO / "runtime" / "export.py"  # the same line, resolved from a real place
    node = ast.parse("from ..compiler.read.files import write_atomic").body[0]
    assert isinstance(node, ast.ImportFrom) and _targets(where, node)[0][1] == REPO / "compiler" / "read" / "files.py"


def _cycles(edges: dict[Path, set[Path]]) -> list[list[Path]]:
    """Strongly connected components with more than one module (or a module importing itself)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    out: list[list[Path]] = []

    def visit(v: Path) -> None:  # Tarjan; the graph is a few hundred modules
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    cycles = _cycles({p: files for p, (_, files, _) in GRAPH.items()})
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(_rel(p) for p in c) for c in cycles)


def test_the_cycle_check_finds_a_cycle():
    a, b, c = REPO / "a.py", REPO / "b.py", REPO / "c.py"
    assert _cycles({a: {b}, b: {c}, c: {a}}) == [[a, b, c]] and _cycles({a: {b}, b: {c}}) == []


def _is_shim(path: Path) -> bool:
    body = ast.parse(path.read_text(encoding="utf-8")).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    imports = [n for n in body if isinstance(n, ast.Import)
               or isinstance(n, ast.ImportFrom) and n.module != "__future__"]
    rest = [n for n in body if not isinstance(n, ast.Import | ast.ImportFrom)
            and not (isinstance(n, ast.Assign) and [getattr(t, "id", "") for t in n.targets] == ["__all__"])]
    return bool(imports) and not rest


def test_no_module_only_re_exports_what_it_imports():
    shims = [_rel(p) for p in _modules(*PACKAGES, "tuner") if _is_shim(p)]
    assert not shims, f"modules that only re-export imports (import from where the code lives instead): {shims}"


def test_the_shim_check_sees_a_shim(tmp_path):
    (tmp_path / "shim.py").write_text('"""Moved."""\nfrom .x import a, b\n\n__all__ = ["a", "b"]\n')
    (tmp_path / "real.py").write_text('"""Real."""\nfrom .x import a\n\n\ndef f():\n    return a\n')
    assert _is_shim(tmp_path / "shim.py") and not _is_shim(tmp_path / "real.py")


@pytest.mark.parametrize("path", _modules("compiler"), ids=_rel)
def test_the_compiler_imports_no_runtime_wizard_or_heavy_package(path):
    absolute, files, _ = GRAPH[path]
    bad = sorted({m for m in absolute if m.split(".")[0] in HEAVY}
                 | {_rel(f) for f in files if f.relative_to(REPO).parts[0] in ("runtime", "tui", "commands")})
    assert not bad, f"{_rel(path)} imports {bad}: the compiler must stay pure Python"


def test_the_wizard_reaches_the_runtime_only_through_its_services():
    offenders = {}
    for path in _modules("tui"):
        runtime = sorted(_rel(f) for f in GRAPH[path][1] if f.relative_to(REPO).parts[0] == "runtime")
        if runtime and path.name != "services.py":
            offenders[_rel(path)] = runtime
    assert not offenders, f"only tui/services.py may import the runtime: {offenders}"


def test_the_check_sees_imports():
    """Not vacuous: relative imports up and across folders are resolved to their files."""
    files = GRAPH[REPO / "compiler" / "memory" / "model.py"][1]
    assert {REPO / "compiler" / "read" / "builtin_models.py", REPO / "compiler" / "parse.py"} <= files
    assert REPO / "compiler" / "read" / "files.py" in GRAPH[REPO / "commands" / "cli.py"][1]
