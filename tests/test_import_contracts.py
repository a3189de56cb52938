"""Layering, checked on the source (the import-linter idea, without the dependency).

* The compiler imports nothing of tuner's runtime or wizard, and none of the heavy packages
  at module level or inside functions (tests/compiler/test_contracts.py checks at run time
  that `tuner compile` loads none of them; this checks every code path, not one run).
  `compiler/artefacts/verify.py` is the exception by design: it is the subprocess `tuner compile
  --verify` runs to ask accelerate and DeepSpeed themselves.
* The wizard reaches the runtime only through `tui/services.py`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "accelerate", "deepspeed", "textual", "transformers", "diffusers", "peft")


def _imports(path: Path, package: str) -> set[str]:
    """Every module a file imports, relative imports made absolute (``tuner.<package>...``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = f"tuner.{package}".split(".")
                parents = path.relative_to(REPO / package).parts[:-1]
                base = [*parts, *parents][: len(parts) + len(parents) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            # `from tuner import runtime` imports a module too: count both spellings
            out |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return out


def _modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


@pytest.mark.parametrize("path", [p for p in _modules("compiler") if p.name != "verify.py"],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_the_compiler_imports_no_runtime_wizard_or_heavy_package(path):
    bad = sorted(m for m in _imports(path, "compiler")
                 if m.startswith(("tuner.runtime", "tuner.tui")) or m.split(".")[0] in HEAVY)
    assert not bad, f"{path.relative_to(REPO)} imports {bad}: the compiler must stay pure Python"


def test_the_wizard_reaches_the_runtime_only_through_its_services():
    offenders = {}
    for path in _modules("tui"):
        runtime = sorted(m for m in _imports(path, "tui") if m.startswith("tuner.runtime"))
        if runtime and path.name != "services.py":
            offenders[str(path.relative_to(REPO))] = runtime
    assert not offenders, f"only tui/services.py may import tuner.runtime: {offenders}"


def test_the_check_sees_imports():
    """Not vacuous: relative and absolute imports are both resolved."""
    imports = _imports(REPO / "compiler" / "estimate_model.py", "compiler")
    assert "tuner.compiler.read.builtin_models" in imports and "tuner.compiler.read.files" in imports
