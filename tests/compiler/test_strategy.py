"""The strategy is a `Strategy` enum (compiler/plan/strategy.py) that code reads through its
properties: no production module tests it as a string (``startswith("zero")``,
``== "fsdp1"``, ``in ("fsdp1", "fsdp2")``), so that a type checker sees a rename. The
manifest keeps the strings."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from tuner.compiler.compile import compile_text
from tuner.compiler.plan.strategy import Strategy

from tests.packages import PACKAGE_FOLDERS

REPO = Path(__file__).resolve().parents[2]
PRODUCTION = PACKAGE_FOLDERS
NAMES = {s.value for s in Strategy}


def _strategy_literal(node: ast.AST) -> str | None:
    """The strategy name a literal (or a tuple/list/set of literals) spells, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES:
        return node.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return next((n for n in map(_strategy_literal, node.elts) if n), None)
    return None


def _prefix_literal(node: ast.AST) -> str | None:
    values = node.elts if isinstance(node, ast.Tuple) else [node]
    return next((v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)
                 and (v.value in ("zero", "fsdp") or v.value in NAMES)), None)


def string_tests(source: str) -> list[tuple[int, str]]:
    """(line, what) for every test of a strategy as a string in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if name := _strategy_literal(side):
                    found.append((node.lineno, f"compares with {name!r}"))
                    break
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith") and node.args
              and (prefix := _prefix_literal(node.args[0]))):
            found.append((node.lineno, f"{node.func.attr}({prefix!r})"))
    return found


def test_the_check_finds_each_kind_of_string_test():
    code = ('a = s.startswith("zero")\nb = s == "fsdp1"\nc = s in ("fsdp1", "fsdp2")\nd = "zero3" != s\n'
            'e = s.startswith(("fsdp", "x"))\nf = s.is_deepspeed\ng = {"zero3": 1}\n')
    assert [line for line, _ in string_tests(code)] == [1, 2, 3, 4, 5]


def test_no_production_module_tests_the_strategy_as_a_string():
    found = [f"{path.relative_to(REPO)}:{line}: {what}"
             for folder in PRODUCTION for path in sorted((REPO / folder).rglob("*.py"))
             if path != REPO / "compiler" / "plan" / "strategy.py"  # the one place that reads the string
             for line, what in string_tests(path.read_text(encoding="utf-8"))]
    assert found == [], "read the strategy through tuner.compiler.plan.strategy.Strategy:\n" + "\n".join(found)


@pytest.mark.parametrize("strategy,deepspeed,stage,fsdp,version,sharded", [
    (Strategy.SINGLE, False, None, False, None, False),
    (Strategy.DDP, False, None, False, None, False),
    (Strategy.FSDP1, False, None, True, 1, True),
    (Strategy.FSDP2, False, None, True, 2, True),
    (Strategy.ZERO0, True, 0, False, None, False),
    (Strategy.ZERO2, True, 2, False, None, False),
    (Strategy.ZERO3, True, 3, False, None, True),
])
def test_properties(strategy, deepspeed, stage, fsdp, version, sharded):
    assert (strategy.is_deepspeed, strategy.zero_stage, strategy.is_fsdp, strategy.fsdp_version,
            strategy.is_sharded) == (deepspeed, stage, fsdp, version, sharded)
    if stage is not None:
        assert Strategy.zero(stage) is strategy
    if version is not None:
        assert Strategy.fsdp(version) is strategy


def test_the_plan_holds_the_enum_and_the_manifest_its_string(tmp_path):
    r = compile_text('[hardware]\nplatform = "cpu"\nnum_processes = 2\n[deepspeed]\nenabled = true\nzero_stage = 3\n',
                     out_dir=tmp_path / "build")
    assert r.ok, [d.format() for d in r.diagnostics.errors]
    assert r.plan.strategy is Strategy.ZERO3
    manifest = json.loads((r.write() / "manifest.json").read_text())
    assert manifest["plan"]["strategy"] == "zero3"

    from tuner.runtime.artefacts import load

    assert load(tmp_path / "build").plan.strategy is Strategy.ZERO3
