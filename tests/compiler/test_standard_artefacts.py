"""The artefacts are standard: anyone's accelerate script, accelerate's launcher and DeepSpeed
use them as compiled, from any working directory (issue 9, items 1, 2, 7 and 8).

The examples are copied into a temporary project (so relative paths inside them, such as the
NVMe example's `offload/`, resolve there), each compiled into a build inside that project.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tuner.compiler.compile import compile_file

from tests import harness
from tests.compiler.helpers import accelerate_launch_env
from tests.conftest import EXAMPLES
from tests.debian import require_package

SCRIPT = Path(__file__).parent / "scripts" / "plain_accelerate_step.py"
EXAMPLE_NAMES = sorted(p.stem for p in EXAMPLES.glob("*.toml"))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of examples/, every example compiled into `<name>-build/` inside it."""
    root = tmp_path_factory.mktemp("project") / "examples"
    shutil.copytree(EXAMPLES, root, ignore=shutil.ignore_patterns("build", "output"))
    for name in EXAMPLE_NAMES:
        result = compile_file(root / f"{name}.toml", out_dir=root / f"{name}-build")
        assert result.ok, [d.format() for d in result.diagnostics.errors]
        result.write()
        if not result.plan.uses_deepspeed:
            continue
        # The same settings for one process: what a one-process CPU script can run (DeepSpeed
        # checks train_batch_size against the real world size).
        one = compile_file(root / f"{name}.toml", ["num_processes=1"], out_dir=root / f"{name}-1proc-build")
        assert one.ok, [d.format() for d in one.diagnostics.errors]
        one.write()
    return root


def _deepspeed_examples(project: Path) -> list[str]:
    return [n for n in EXAMPLE_NAMES if (project / f"{n}-build" / "deepspeed.json").exists()]



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _plain_script(project: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    """The plain script as one CPU process, in the environment accelerate's launcher derives
    from the build's accelerate.yaml, started from the project root."""
    from tests.ops_wait import wait_for_ops

    wait_for_ops(nvme="nvme" in name)
    env = accelerate_launch_env(project / f"{name}-1proc-build" / "accelerate.yaml")
    env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(_free_port()), OMP_NUM_THREADS="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=project, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=900)  # DeepSpeedCPUAdam may JIT-build first


@pytest.fixture(scope="module")
def script_runs(project):
    """name -> the plain script's one-process run on that example's build, each launched once. On
    zero2_offload (its JSON names an optimizer) the script first offers a torch optimizer beside it
    (`--torch-optimizer-first`: accelerate's refusal recorded, then the JSON's optimizer prepared)."""
    runs: dict[str, subprocess.CompletedProcess] = {}

    def run(name: str) -> subprocess.CompletedProcess:
        if name not in runs:
            runs[name] = _plain_script(project, name, *(["--torch-optimizer-first"] if name == REFUSAL_EXAMPLE else []))
        return runs[name]

    return run


#: The example whose deepspeed.json names an optimizer: the script's torch optimizer is refused there.
REFUSAL_EXAMPLE = "zero2_offload"


def _aio_available() -> bool:
    from deepspeed.ops.op_builder import AsyncIOBuilder

    return AsyncIOBuilder().is_compatible(verbose=False)


def test_deepspeed_examples_are_the_ones_expected(project):
    assert _deepspeed_examples(project) == ["diffusion_dit", "zero1", "zero2_offload", "zero3_nvme"]


@pytest.mark.slow  # starts a rank process (tests/tiers.py)
@pytest.mark.parametrize("name", ["diffusion_dit", "zero1", "zero2_offload", "zero3_nvme"])
def test_plain_accelerate_script_prepares_with_the_compiled_deepspeed_json(project, script_runs, name):
    ds = json.loads((project / f"{name}-1proc-build" / "deepspeed.json").read_text())
    if ds.get("zero_optimization", {}).get("offload_param", {}).get("device") == "nvme":
        # DeepSpeed's async_io op (built on first use, minutes) needs libaio's headers
        require_package("libaio-dev", _aio_available, "NVMe offload needs DeepSpeed's async_io op")
    run = script_runs(name)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["ok"] and out["distributed_type"] == "DEEPSPEED"
    assert out["train_batch_size"] == ds["train_batch_size"] if isinstance(ds.get("train_batch_size"), int) else True
    if ds["zero_optimization"].get("offload_optimizer", {}).get("device") == "cpu":
        # ZeRO-Offload: DeepSpeed's CPU Adam, built by DeepSpeed from the JSON's block, or swapped
        # in by accelerate for the script's torch AdamW when the JSON names none (zero3_nvme)
        assert out["optimizer"] == "DeepSpeedCPUAdam"
    elif "optimizer" not in ds:
        assert out["optimizer"] == "AdamW"  # the script's own torch optimizer


@pytest.mark.slow  # starts a rank process (tests/tiers.py)
def test_accelerate_refuses_a_torch_optimizer_beside_an_optimizer_block(project, script_runs):
    """The check the artefacts used to trip on every plain script, still live in accelerate:
    zero1's torch optimizer passes it (test above); it fires where the JSON names an optimizer.
    Shown in zero2_offload's run of the test above (one process: the torch optimizer refused, then
    the JSON's prepared)."""
    assert "optimizer" in json.loads((project / f"{REFUSAL_EXAMPLE}-1proc-build" / "deepspeed.json").read_text())
    run = script_runs(REFUSAL_EXAMPLE)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    refused = json.loads(run.stdout.strip().splitlines()[-1])["torch_optimizer_refused"]
    assert "You cannot specify an optimizer in the config file and in the code at the same time" in refused


def test_compile_verify_accepts_every_example(project):
    """The packages' own verdict on every example (one subprocess for all of them), and the
    `tuner compile --verify` command itself on one."""
    builds = [str(project / f"{n}-build") for n in EXAMPLE_NAMES]  # at each example's own world size
    r = subprocess.run([sys.executable, "-m", "tuner.runtime.verify", *builds], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert r.stdout.count("verify: accelerate") == len(builds)
    cli = harness.tuner('compile', str(project / 'zero3_nvme.toml'), '-q', '--out', str(project / 'cli-build'), '--verify', timeout=300)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "verify: accelerate and DeepSpeed accept the build" in cli.stdout


def test_verify_reports_the_packages_refusal(project, tmp_path):
    """A build accelerate refuses (a key set both in the YAML and in deepspeed.json, which
    accelerate's DeepSpeedPlugin rejects) fails verify with accelerate's own message."""
    shutil.copy(project / "zero1.toml", tmp_path / "zero1.toml")
    shutil.copytree(project / "zero1-build", tmp_path / "zero1-build")
    yaml_path = tmp_path / "zero1-build" / "accelerate.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("deepspeed_config:\n",
                                                       "deepspeed_config:\n  gradient_accumulation_steps: 2\n"))
    r = subprocess.run([sys.executable, "-m", "tuner.runtime.verify", str(tmp_path / "zero1-build")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DeepSpeedPlugin" in r.stdout and "deepspeed_config_file" in r.stdout


def test_accelerate_yaml_names_deepspeed_json_relative_to_the_project(project):
    for name in _deepspeed_examples(project):
        text = (project / f"{name}-build" / "accelerate.yaml").read_text()
        assert f"deepspeed_config_file: {name}-build/deepspeed.json" in text, text
        assert str(project) not in text
