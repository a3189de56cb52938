"""`tuner launch` runs a plain accelerate script (tests/launch/plain_accelerate.py, no tuner
import) on 2 real gloo ranks: each rank sees its own rank and a world of 2, gets its own data
rows, the loss falls, and parameters are sharded as the strategy says.

Two launches: DDP (the one world of 2 that a bare accelerate script must see, not two one-process
worlds) and ZeRO-3 (DeepSpeed under the CPU shim, parameters partitioned). `tuner launch`'s FSDP2
and ZeRO-2 cases ride the HF Trainer's launches (test_hf_trainer.py: FSDP2's DTensor shards and
ZeRO-2's partition of the master weights, each about half per rank), and accelerate's own
test_ops.py runs on ZeRO-2 (test_accelerate_scripts.py); every strategy trains through `tuner run`
in tests/runtime/test_strategies.py.

ZeRO builds: the script brings its own torch optimizer, as plain accelerate scripts do; that
needs a deepspeed.json without an "optimizer" block (accelerate refuses both at once).
"""

from __future__ import annotations

import pytest

from launch_helpers import BUILDS, CPU2, PLAIN, compile_build, falling, rank_reports, tuner

pytestmark = pytest.mark.slow

#: What a C++ thread left running at the interpreter's exit prints as the process aborts.
TEARDOWN_ABORT = "terminate called without an active exception"
DIST_TYPE = {"ddp": "MULTI_CPU", "zero3": "DEEPSPEED"}


@pytest.mark.parametrize("strategy", ["ddp", "zero3"])
def test_plain_script_on_two_cpu_ranks(tmp_path, strategy):
    build = compile_build(tmp_path, CPU2, BUILDS[strategy])
    out = tmp_path / "report"
    p = tuner("launch", str(build), str(PLAIN), "--out", str(out), "--steps", "16", cwd=tmp_path, timeout=400)
    if p.returncode != 0 and strategy == "zero3" and TEARDOWN_ABORT in p.stderr:
        # DeepSpeed/gloo's teardown at the interpreter's exit, after the script has finished, now and then
        # aborts a ZeRO-3 rank (seen 2 runs in about 10, upstream; a plain script cannot os._exit as tuner's own
        # worker does): launched once more, and the second launch must pass every assertion.
        p = tuner("launch", str(build), str(PLAIN), "--out", str(out), "--steps", "16", cwd=tmp_path, timeout=400)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    assert "Traceback" not in p.stderr
    check_reports(strategy, rank_reports(out, 2))


def check_reports(strategy: str, reports: list[dict]) -> None:
    for r, rep in enumerate(reports):
        assert (rep["process_index"], rep["num_processes"], rep["env_rank"], rep["env_world"]) == (r, 2, r, 2)
        assert rep["distributed_type"] == DIST_TYPE[strategy]
        assert falling(rep["losses"]), rep["losses"]
    rows0, rows1 = set(reports[0]["rows"]), set(reports[1]["rows"])
    assert not rows0 & rows1, "both ranks trained on the same rows: the dataloader is not sharded"
    assert len(rows0 | rows1) == 16 * 8 * 2

    total = sum(p.get("ds_numel", p["numel"]) for p in reports[0]["params"])
    if strategy == "zero3":
        for rep in reports:
            held = sum(p["local_numel"] for p in rep["params"])
            full = sum(p["ds_numel"] for p in rep["params"])
            assert full == total and 0.4 < held / full < 0.6, (held, full)
    else:  # DDP: every rank holds the whole model
        for rep in reports:
            assert sum(p.get("local_numel", p["numel"]) for p in rep["params"]) == total
