"""Fixtures for the reliability tests: one tiny real run whose checkpoints the export and
damaged-checkpoint tests copy (never modify)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import harness

TINY_RUN = """\
[model]
family = "causal_lm"
path = "builtin:micro-llama"
[hardware]
platform = "cpu"
num_processes = 1
[data]
seq_len = 32
[training]
micro_batch_size = 2
max_steps = {steps}
[checkpoint]
every_steps = 2
[output]
dir = "out"
"""


def run_env() -> dict[str, str]:
    return harness.env()


def write_tiny_run(d: Path, steps: int = 4) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    settings = d / "settings.toml"
    settings.write_text(TINY_RUN.format(steps=steps), encoding="utf-8")
    return settings


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """A finished 1-rank run (4 steps, checkpoints at steps 2 and 4); returns its folder."""
    d = tmp_path_factory.mktemp("finished_run")
    settings = write_tiny_run(d)
    proc = harness.tuner("run", str(settings), cwd=d, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (d / "out" / "checkpoints" / "step-2").is_dir() and (d / "out" / "checkpoints" / "step-4").is_dir()
    return d


@pytest.fixture(scope="session")
def finished_fsdp_run(tmp_path_factory) -> Path:
    """A finished 1-rank FSDP2 run with a sharded (DCP) checkpoint at step 2."""
    d = tmp_path_factory.mktemp("finished_fsdp_run")
    settings = write_tiny_run(d, steps=2)
    settings.write_text(settings.read_text() + "[fsdp]\nenabled = true\nversion = 2\n", encoding="utf-8")
    proc = harness.tuner("run", str(settings), cwd=d, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (d / "out" / "checkpoints" / "step-2" / "pytorch_model_fsdp_0" / ".metadata").is_file()
    return d
