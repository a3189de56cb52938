"""`tuner run` on 2 real gloo ranks with people's own data, three launches, FSDP2 and ZeRO-2:

* a chat JSONL (system prompts, multi-turn rows) streamed under FSDP2, logging to TensorBoard
  through [logging] log_with (the event files hold the loss of every log step, equal to
  metrics.jsonl's; the progress, off a terminal, is one plain line per log step with loss,
  tokens/s, learning rate and ETA), then resumed in the middle of the streamed epoch (no row
  repeated or skipped): two launches;
* a parquet instruction set under ZeRO-2, no checkpoint and no export (none written).

The other formats (jsonl chat read whole, jsonl text, jsonl prompt/completion, csv with its
columns mapped, a `save_to_disk` folder's split) are read, masked and packed by the same family
code before any batch reaches a rank: tests/data/test_format_rows.py checks each of them
in-process with these assertions; the ranks' side (sharding, steps, loss) does not depend on
the format: the map-style (parquet) and streamed launches here check it.

Each launch shows the run's "data: FILE (FORMAT)" line, the rows each rank trained (the
batches themselves, through the row-trace callback: distinct across the ranks, every document in
them one of the file's rows), a finite loss at every step, and the loss mask the ranks trained
with (chat: exactly the assistant turns; instruction: exactly the completion). The formats'
reading, detection and column mapping in detail are test_formats.py's, in-process; arrow files,
.txt files and glob shards are read and packed only there, not trained on ranks: a launch costs
25-45 s on a loaded 2-core machine, most of it the two ranks starting."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import harness
from tests.data.data_helpers import check_trained as _check_trained
from tests.data.data_helpers import instruction_rows
from tests.data.row_trace import ROWS
from tests.runtime.runtime_helpers import to_toml
from tests.tiny_chat_llama import chat_rows

pytestmark = pytest.mark.slow


def _run(d: Path, settings: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    (d / "settings.toml").write_text(to_toml(settings))
    env = {"TUNER_TEST_ROWS_DIR": str(d / "rows"), "HF_DATASETS_CACHE": str(d.parent / "hf-cache")}
    return harness.tuner("run", str(d / "settings.toml"), "--callback", ROWS, *args, cwd=d, timeout=timeout, env=env)


def _trace(d: Path, rank: int) -> dict:
    return json.loads((d / "rows" / f"rank{rank}.json").read_text())


def _rows_by_step(trace: dict) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for b in trace["batches"]:
        out.setdefault(b["step"], []).extend(b["rows"])
    return out


def _settings(model: Path, data: dict, **sections) -> dict:
    s = {"model": {"family": "causal_lm", "path": str(model)},
         "hardware": {"platform": "cpu", "num_processes": 2},
         "data": {"seq_len": 128, "validation_split": 0.0, **data},
         "training": {"micro_batch_size": 2, "learning_rate": 1e-2, "max_steps": 6, "warmup_steps": 0,
                      "log_every": 1},
         "checkpoint": {"every_steps": 3, "keep_last": 3, "export": False},
         "output": {"dir": "out"}}
    for k, v in sections.items():
        s.setdefault(k, {}).update(v)
    return s


FSDP2 = {"enabled": True, "version": 2, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}
ZERO2 = {"enabled": True, "zero_stage": 2}


@pytest.fixture(scope="module")
def tok(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model))


def test_streamed_chat_under_fsdp2_resumes_mid_epoch_without_repeating_or_skipping(tmp_path, tiny_model, tok):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    for d in (straight, resumed):
        d.mkdir()
        (d / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chat_rows(200)))
    settings = _settings(tiny_model, {"path": "chat.jsonl", "streaming": True}, fsdp=FSDP2,
                         logging={"log_with": "tensorboard", "project": "tiny"})
    p = _run(straight, settings)
    assert p.returncode == 0, (p.stdout + p.stderr)[-5000:]
    assert "data: chat.jsonl (chat, streamed" in p.stdout
    assert "tuner run: fsdp2 on 2 rank(s)" in p.stdout
    traces = [_trace(straight, r) for r in (0, 1)]
    rows = [_rows_by_step(t) for t in traces]
    assert sorted(rows[0]) == list(range(1, 7))
    every = [k for r in rows for step in r.values() for k in step]
    assert len(every) == len(set(every)) == 2 * 6 * 2, "no packed row twice, on one rank or across the two"
    assert all(b["has_position_ids"] for t in traces for b in t["batches"]), "packed rows carry position ids"
    m = [x for x in traces[0]["metrics"] if "loss" in x]
    assert len(m) == 6 and all(x["tokens_per_step"] > 0 and 0 <= x["padding_ratio"] < 1 for x in m)
    assert all(math.isfinite(x["loss"]) for x in m)
    assert (straight / "out" / "checkpoints" / "step-3" / "data_stream_rank1.json").is_file()
    texts = _check_trained(traces, "chat", tok, chat_rows(200))
    assert any("<|im_start|>system" in x for x in texts), "a row with a system prompt was trained"
    assert any(x.count("<|im_start|>assistant") > 1 for x in texts), "a multi-turn row was trained"
    _check_tensorboard_and_progress(straight, p, 6)

    # Resume from the straight run's step-3 checkpoint: steps 4-6 see exactly its rows.
    (resumed / "out" / "checkpoints").mkdir(parents=True)
    shutil.copytree(straight / "out" / "checkpoints" / "step-3", resumed / "out" / "checkpoints" / "step-3")
    (resumed / "out" / "checkpoints" / "latest").write_text("step-3\n")
    p = _run(resumed, settings, "--resume", "latest")
    assert p.returncode == 0, (p.stdout + p.stderr)[-5000:]
    assert "resumed from" in p.stdout
    for r in (0, 1):
        again = _rows_by_step(_trace(resumed, r))
        assert sorted(again) == [4, 5, 6]
        assert again == {s: rows[r][s] for s in (4, 5, 6)}, f"rank {r}: the resumed run trains the same rows"


def test_parquet_instruction_set_under_zero2(tmp_path, tiny_model, tok):
    from datasets import Dataset

    rows = instruction_rows(60, seed=9)
    Dataset.from_list(rows).to_parquet(str(tmp_path / "qa.parquet"))
    settings = _settings(tiny_model, {"path": "qa.parquet", "validation_split": 0.1},
                         checkpoint={"every_steps": 0}, deepspeed=ZERO2)
    p = _run(tmp_path, settings)
    assert p.returncode == 0, (p.stdout + p.stderr)[-5000:]
    assert "data: qa.parquet (instruction): 60 documents packed into" in p.stdout
    assert "tuner run: zero2 on 2 rank(s)" in p.stdout
    assert not (tmp_path / "out" / "checkpoints").exists() and not (tmp_path / "out" / "final").exists()
    m = [x for x in _trace(tmp_path, 0)["metrics"] if "loss" in x]
    assert len(m) == 6
    assert m[-1]["loss"] < m[0]["loss"], [x["loss"] for x in m]
    assert all(0 <= x["padding_ratio"] < 1 for x in m)
    traces = [_trace(tmp_path, r) for r in (0, 1)]
    by_step = [_rows_by_step(t) for t in traces]
    first = [k for r in by_step for step in (1, 2, 3) for k in r[step]]  # 15 rows: steps 1-3 are in epoch 0
    assert len(first) == len(set(first)) == 3 * 2 * 2, "the rows are sharded: none on both ranks, or twice"
    _check_trained(traces, "instruction", tok, rows)


def _check_tensorboard_and_progress(d: Path, p: subprocess.CompletedProcess, steps: int) -> None:
    """[logging] log_with = tensorboard: the event files hold the loss of every log step, equal to
    metrics.jsonl's; off a terminal the progress is one plain line per log step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    metrics = [json.loads(x) for x in (d / "out" / "metrics.jsonl").read_text().splitlines()]
    logged_losses = {m["step"]: m["loss"] for m in metrics if "loss" in m}
    assert sorted(logged_losses) == list(range(1, steps + 1))
    logged = {}
    for folder in {e.parent for e in (d / "out" / "logs" / "tiny").rglob("events.out.tfevents.*")}:
        ea = EventAccumulator(str(folder))
        ea.Reload()
        if "loss" in ea.Tags()["scalars"]:
            logged = {e.step: e.value for e in ea.Scalars("loss")}
    assert logged == {k: pytest.approx(v, rel=1e-6) for k, v in logged_losses.items()}
    assert "trackers: tensorboard" in p.stdout + p.stderr
    # the progress, off a terminal: one plain line per log step
    lines = [ln for ln in p.stderr.splitlines() if re.match(r"step \d+/", ln)]
    assert len(lines) == steps, (p.stdout + p.stderr)[-3000:]
    assert re.fullmatch(rf"step {steps}/{steps} loss \d+\.\d{{4}} lr \d\.\d\de[-+]\d\d tok/s \d+ eta 0:00:00",
                        lines[-1]), lines
