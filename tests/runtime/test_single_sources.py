"""The runtime (and the CLI) re-declare nothing the compiler declares: the artefact file names
come from compiler/artefacts/emit.py, the plan's fields from compiler/plan/rules.py's `Plan`, the exit codes
from compiler/diagnostics.py (the import contracts allow runtime -> compiler)."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

from tuner.compiler.artefacts import emit
from tuner.compiler.plan.plan import Plan

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("runtime", "tuner")
FILE_NAMES = {emit.ACCELERATE_YAML, emit.DEEPSPEED_JSON, emit.MANIFEST_JSON}


def _modules():
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            yield path.relative_to(REPO).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def test_no_artefact_file_name_is_spelled_again():
    found = [f"{rel}:{node.lineno}: {node.value!r}" for rel, tree in _modules() for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and node.value in FILE_NAMES]
    assert found == [], "use the names compiler/artefacts/emit.py declares:\n" + "\n".join(found)


def test_no_exit_code_is_declared_again():
    """A module-level name for an exit status (EXIT_*, *_EXIT) bound to a number literal."""
    found = []
    for rel, tree in _modules():
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                found += [f"{rel}:{node.lineno}: {n}" for n in names if n.startswith("EXIT_") or n.endswith("_EXIT")]
    assert found == [], "use the exit codes compiler/diagnostics.py declares:\n" + "\n".join(found)


def test_the_runtime_checks_a_manifest_plan_against_the_compilers_plan_fields(tmp_path):
    from tuner.compiler.compile import compile_text
    from tuner.runtime.artefacts import manifest_problem

    r = compile_text('[hardware]\nplatform = "cpu"\n', out_dir=tmp_path / "build")
    assert r.ok and r.plan is not None
    manifest = json.loads((r.write() / emit.MANIFEST_JSON).read_text())
    # the Plan's fields, and the two it derives from its strategy (compiler/plan/plan.py)
    assert set(manifest["plan"]) == {f.name for f in dataclasses.fields(Plan)} | {"uses_deepspeed", "uses_fsdp"}
    assert manifest_problem(manifest) is None
    for name in manifest["plan"]:
        broken = {**manifest, "plan": {k: v for k, v in manifest["plan"].items() if k != name}}
        assert manifest_problem(broken) == f"plan.{name} is None"
    extra = {**manifest, "plan": {**manifest["plan"], "shards": 2}}
    assert manifest_problem(extra) == "unknown plan keys shards"
