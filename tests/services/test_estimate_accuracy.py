"""The estimate against what real ranks hold: two gloo ranks on this CPU machine.

For DDP, FSDP2, ZeRO-2 and ZeRO-3, the runtime trains the built-in tiny Llama for one step
(its own artefact loader, launch environment and `Trainer`; see `_measure_ranks.py`), and
each rank records `tuner.runtime.memory.rank_state_bytes` after the last optimizer step.
The estimator's per-rank parameters, gradients, optimizer state and fp32 master copy must
be within 5% of those bytes, kind by kind. (No GPU is lent to this project's test machine,
so the comparison with `torch.cuda.max_memory_allocated` is not made here.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tuner.compiler.compile import compile_file
from tuner.compiler.memory.estimate import estimate

from tests.conftest import run_tuner

HELPER = Path(__file__).with_name("_measure_ranks.py")
KINDS = ("params", "grads", "optimizer", "master")
STRATEGIES = {
    "ddp": "",
    "fsdp2": '[fsdp]\nenabled = true\nversion = 2\ntransformer_layer_cls_to_wrap = ["LlamaDecoderLayer"]\n',
    "zero2": "[deepspeed]\nenabled = true\nzero_stage = 2\n",
    "zero3": "[deepspeed]\nenabled = true\nzero_stage = 3\n",
}
BASE = """[model]
path = "builtin:tiny-llama"
[data]
seq_len = 32
validation_split = 0.0
[hardware]
platform = "cpu"
num_processes = 2
[training]
micro_batch_size = 2
max_steps = 1
warmup_steps = 1
[checkpoint]
export = false
"""


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, tuple[dict, list[dict]]]:
    """strategy -> (estimated bytes per kind, measured bytes per rank); one launcher for all."""
    root = tmp_path_factory.mktemp("accuracy")
    predicted, pairs = {}, []
    for name, block in STRATEGIES.items():
        d = root / name
        d.mkdir()
        settings = d / "settings.toml"
        settings.write_text(BASE + '[output]\ndir = "out"\n' + block)
        compiled = run_tuner("compile", str(settings), "--out", str(d / "build"), "-q")
        assert compiled.returncode == 0, compiled.stderr
        result = compile_file(settings)
        assert result.plan.strategy == name
        chosen = estimate(result.settings, result.plan).chosen
        predicted[name] = {k: chosen.rank_state(k) for k in KINDS}
        pairs += [str(d / "build"), str(d / "measured")]
    run = subprocess.run([sys.executable, str(HELPER), "launch", *pairs], capture_output=True, text=True,
                         timeout=900, cwd=root)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    def measured(name: str, rank: int) -> dict:
        return json.loads((root / name / "measured" / f"rank{rank}.json").read_text())["state_bytes"]

    return {name: (predicted[name], [measured(name, r) for r in (0, 1)])
            for name in STRATEGIES}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_estimated_rank_state_matches_real_ranks(measured, strategy):
    predicted, ranks = measured[strategy]
    for rank, held in enumerate(ranks):
        for kind in KINDS:
            assert predicted[kind] == pytest.approx(held[kind], rel=0.05, abs=64), (strategy, rank, kind, predicted, held)
        assert sum(predicted.values()) == pytest.approx(sum(held[k] for k in KINDS), rel=0.05)
