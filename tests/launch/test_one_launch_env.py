"""One derivation of the environment `accelerate launch` gives a rank: `tuner.runtime.verify.launch_env`.

`tuner compile --verify` and the runtime's CPU launcher (`runtime/launch_env.accelerate_env`)
both call it, no other production module calls accelerate's derivation functions, and no
production module takes a pytest fixture. What it derives equals what accelerate's own
launcher derives (tests/compiler/interop.launch_view, which follows `accelerate launch`'s
dispatch step by step), with CUDA pretended so that a GPU build takes its GPU branch.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from tuner.compiler.compile import compile_text
from tuner.runtime.artefacts import load
from tuner.runtime.launch_env import accelerate_env, config_flags
from tuner.runtime.verify import accelerate_launch_env, launch_env, pretend_cuda

from tests.compiler.interop import FAKE_GPUS, launch_view
from tests.packages import PACKAGE_FOLDERS

REPO = Path(__file__).resolve().parents[2]
PRODUCTION = PACKAGE_FOLDERS
#: accelerate's launch-environment derivation: only `launch_env` may call these.
DERIVATION = {"_validate_launch_command", "prepare_multi_gpu_env", "prepare_deepspeed_cmd_env",
              "prepare_simple_launcher_cmd_env", "launch_command_parser"}


def _modules():
    for folder in PRODUCTION:
        for path in sorted((REPO / folder).rglob("*.py")):
            yield path.relative_to(REPO).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _enclosing_functions(tree: ast.AST):
    """(function name, node) for every node, the name of the innermost def around it."""
    def walk(node: ast.AST, name: str):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else name
            yield inner, child
            yield from walk(child, inner)
    yield from walk(tree, "<module>")


def test_only_launch_env_derives_the_launch_environment():
    callers = set()
    for rel, tree in _modules():
        for func, node in _enclosing_functions(tree):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if called in DERIVATION:
                    callers.add((rel, func))
    assert callers == {("runtime/verify.py", "launch_env")}


def test_no_production_module_takes_a_pytest_fixture():
    found = []
    for rel, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                found += [f"{rel}: imports {n}" for n in names if n.split(".")[0] in ("pytest", "_pytest")]
            elif isinstance(node, ast.arg) and node.arg == "monkeypatch":
                found.append(f"{rel}:{node.lineno}: a `monkeypatch` parameter")
    assert found == []


GPU_BUILDS = {
    "fsdp2": '[hardware]\nplatform = "cuda"\nnum_processes = 2\n[fsdp]\nenabled = true\n',
    "zero2": '[hardware]\nplatform = "cuda"\nnum_processes = 2\n[deepspeed]\nenabled = true\nzero_stage = 2\n',
}
#: Variables naming files by path (the runtime names them absolutely, the YAML relatively).
_PATHS = {"ACCELERATE_DEEPSPEED_CONFIG_FILE", "ACCELERATE_CONFIG_DS_FIELDS"}


@pytest.mark.parametrize("name", sorted(GPU_BUILDS))
def test_verify_and_the_runtime_derive_what_accelerates_launcher_does(name, tmp_path, monkeypatch):
    # The runtime's environment is what differs from this process's: start from one without
    # accelerate's variables, so that every derived choice shows.
    for key in [k for k in os.environ if k.startswith(("ACCELERATE_", "FSDP_"))]:
        monkeypatch.delenv(key)
    result = compile_text(GPU_BUILDS[name], path=tmp_path / "settings.toml", out_dir=tmp_path / "build")
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    arts = load(result.write())
    yaml = tmp_path / "build" / "accelerate.yaml"
    monkeypatch.chdir(tmp_path)
    accelerates = launch_view(yaml)["env"]  # accelerate's own dispatch, choices only
    assert accelerates["ACCELERATE_USE_" + ("FSDP" if name == "fsdp2" else "DEEPSPEED")] == "true"
    with pretend_cuda(FAKE_GPUS):
        verifys = accelerate_launch_env(yaml)
        runtimes = accelerate_env(arts)
        args, _ = launch_env(config_flags(arts), check_port=False)
    assert args.num_processes == 2
    for key, value in accelerates.items():
        assert verifys[key] == value, key
        if key not in _PATHS:
            assert runtimes[key] == value, key
