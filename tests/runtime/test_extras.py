"""A run whose build needs a package of another extra (DeepSpeed, diffusers, peft) is refused
before any rank starts: one line naming the extra, exit 2, no traceback.

The package is hidden in a fresh interpreter (None in sys.modules: `import` then fails as
for a package that is not installed), as tests/reliability/test_endings.py does for textual.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from tuner.compiler.diagnostics import EXIT_USAGE
from tuner.runtime.extras import EXTRA_OF, install_hint

from tests.conftest import EXAMPLES, run_tuner


def _hidden_run(tmp_path, package: str, argv: list[str], env=None) -> subprocess.CompletedProcess:
    code = (f"import sys; sys.modules[{package!r}] = None\n"
            f"from tuner.commands.cli import main; sys.exit(main({argv!r}))")
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=env)


def _build(tmp_path, example: str) -> str:
    shutil.copy(EXAMPLES / f"{example}.toml", tmp_path / "settings.toml")  # its output stays in tmp_path
    c = run_tuner("compile", str(tmp_path / "settings.toml"), "--out", str(tmp_path / "build"), "-q")
    assert c.returncode == 0, c.stderr
    return str(tmp_path / "build")


@pytest.mark.parametrize("example, package, extra", [
    ("diffusion_unet", "diffusers", "diffusion"),
    ("zero1", "deepspeed", "deepspeed"),
    ("embedding_minilm_lora", "peft", "lora"),
])
def test_tuner_run_names_the_extra_of_a_missing_package(tmp_path, example, package, extra):
    build = _build(tmp_path, example)
    p = _hidden_run(tmp_path, package, ["run", build])
    assert p.returncode == EXIT_USAGE, p.stderr
    assert f"needs {package}, which is not installed: pip install 'tuner-train[{extra}]'" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "out" / "checkpoints").exists(), "no rank started"


def test_a_missing_deepspeed_is_named_before_the_state_of_its_op_builds(tmp_path):
    """Without DeepSpeed installed, its op builds do not matter: the one line names the extra,
    not a build lock (the whole suite once met a build in progress here, printed first)."""
    import os
    import signal

    build = _build(tmp_path, "zero1")
    lock = tmp_path / "ext" / "cpu_adam" / "lock"
    lock.parent.mkdir(parents=True)
    code = f"import os, signal; os.open({str(lock)!r}, os.O_CREAT | os.O_EXCL); os.kill(os.getpid(), signal.SIGKILL)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == -signal.SIGKILL  # a killed build's lock
    p = _hidden_run(tmp_path, "deepspeed", ["run", build], env={**os.environ, "TORCH_EXTENSIONS_DIR": str(lock.parent.parent)})
    assert p.returncode == EXIT_USAGE, p.stderr
    assert p.stderr.strip().splitlines() == [
        "tuner run: this build's strategy (zero1) needs deepspeed, which is not installed: "
        "pip install 'tuner-train[deepspeed]'"], p.stderr
    assert lock.exists()


def test_tuner_launch_of_a_deepspeed_build_names_the_extra(tmp_path):
    build = _build(tmp_path, "zero1")
    p = _hidden_run(tmp_path, "deepspeed", ["launch", build, "-m", "json.tool"])
    assert p.returncode == EXIT_USAGE, p.stderr
    assert p.stderr.startswith("tuner launch: ") and "pip install 'tuner-train[deepspeed]'" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_a_plain_run_needs_no_per_family_extra(tmp_path):
    """FSDP2 on a language model (examples/fsdp2.toml) needs none of DeepSpeed, diffusers, peft."""
    from tuner.runtime.artefacts import load
    from tuner.runtime.extras import needed

    arts = load(_build(tmp_path, "fsdp2"))
    assert set(needed(arts, trains=True)) == {"torch", "accelerate", "transformers", "datasets"}  # all in [runtime]


def test_every_extra_named_exists_in_pyproject():
    import tomllib

    from tests.conftest import REPO

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for package, extra in EXTRA_OF.items():
        assert extra in extras, f"{package}: extra {extra!r} is not in pyproject.toml"
        wanted = [r for r in extras[extra] if r.split(">")[0].split("<")[0].split("=")[0].strip() == package]
        assert wanted, f"pyproject's extra {extra!r} does not install {package}"
    assert "tuner-train[" in install_hint("diffusers") and install_hint("numpy") is None
