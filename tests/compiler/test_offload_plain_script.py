"""ZeRO-Offload without an optimizer block (issue 23 item 1): a plain accelerate script with a
torch AdamW prepares and steps with the compiled deepspeed.json, on a real one-rank gloo run.

accelerate's `_prepare_deepspeed` swaps a torch AdamW/Adam for DeepSpeed's CPU Adam when the
JSON offloads the optimizer and names none; with a block in the JSON the same script fails
("You cannot specify an optimizer in the config file and in the code at the same time").
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.compiler.compile import compile_text

from tests.compiler.helpers import accelerate_launch_env

SCRIPT = Path(__file__).parent / "scripts" / "plain_accelerate_step.py"
SETTINGS = """
[model]
family = "causal_lm"
path = "builtin:tiny-llama"
[hardware]
platform = "cpu"
num_processes = 1
[deepspeed]
enabled = true
zero_stage = 2
offload_optimizer = "cpu"
[training]
micro_batch_size = 4
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # starts a rank process (tests/tiers.py)
def test_torch_adamw_script_steps_with_a_zero2_offload_build_that_names_no_optimizer(tmp_path):
    settings = tmp_path / "settings.toml"
    settings.write_text(SETTINGS)
    result = compile_text(SETTINGS, path=settings)
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    result.write()
    ds = json.loads((tmp_path / "build" / "deepspeed.json").read_text())
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "optimizer" not in ds and "scheduler" not in ds
    from tests.ops_wait import wait_for_ops

    wait_for_ops()
    env = accelerate_launch_env(tmp_path / "build" / "accelerate.yaml")
    env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(_free_port()), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
    run = subprocess.run([sys.executable, str(SCRIPT), "--torch-optimizer"], cwd=tmp_path,
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["ok"] and out["distributed_type"] == "DEEPSPEED"
    assert out["optimizer"] == "DeepSpeedCPUAdam"  # accelerate swapped the script's AdamW in prepare
