"""`tuner run` on 2 real gloo ranks with people's own data: a chat JSONL streamed under FSDP2
(and resumed in the middle of the streamed epoch: no row repeated or skipped), and an
instruction set in parquet under ZeRO-2. Other formats are covered in-process
(test_formats.py): each run here costs about a minute on this machine."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data.row_trace import ROWS
from tests.runtime.runtime_helpers import to_toml, tuner_env
from tests.tiny_chat_llama import chat_rows, sentences

pytestmark = pytest.mark.slow


def _run(d: Path, settings: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    (d / "settings.toml").write_text(to_toml(settings))
    env = tuner_env({"TUNER_TEST_ROWS_DIR": str(d / "rows"), "HF_DATASETS_CACHE": str(d.parent / "hf-cache")})
    return subprocess.run([sys.executable, "-m", "tuner", "run", str(d / "settings.toml"), "--callback", ROWS, *args],
                          cwd=d, capture_output=True, text=True, timeout=timeout, env=env)


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


def test_streamed_chat_under_fsdp2_resumes_mid_epoch_without_repeating_or_skipping(tmp_path, tiny_model):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    for d in (straight, resumed):
        d.mkdir()
        (d / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chat_rows(200)))
    settings = _settings(tiny_model, {"path": "chat.jsonl", "streaming": True}, fsdp=FSDP2)
    p = _run(straight, settings)
    assert p.returncode == 0, (p.stdout + p.stderr)[-5000:]
    assert "data: chat.jsonl (chat, streamed" in p.stdout
    traces = [_trace(straight, r) for r in (0, 1)]
    rows = [_rows_by_step(t) for t in traces]
    assert sorted(rows[0]) == list(range(1, 7))
    every = [k for r in rows for step in r.values() for k in step]
    assert len(every) == len(set(every)) == 2 * 6 * 2, "no packed row twice, on one rank or across the two"
    assert all(b["has_position_ids"] for t in traces for b in t["batches"]), "packed rows carry position ids"
    m = [x for x in traces[0]["metrics"] if "loss" in x]
    assert len(m) == 6 and all(x["tokens_per_step"] > 0 and 0 <= x["padding_ratio"] < 1 for x in m)
    assert (straight / "out" / "checkpoints" / "step-3" / "data_stream_rank1.json").is_file()

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


def test_parquet_instruction_set_under_zero2(tmp_path, tiny_model):
    from datasets import Dataset

    s = sentences(120, seed=9)
    rows = [{"prompt": f"Question: {s[2 * i]}\nAnswer:", "completion": " " + s[2 * i + 1]} for i in range(60)]
    Dataset.from_list(rows).to_parquet(str(tmp_path / "qa.parquet"))
    settings = _settings(tiny_model, {"path": "qa.parquet", "validation_split": 0.1},
                         deepspeed={"enabled": True, "zero_stage": 2})
    p = _run(tmp_path, settings)
    assert p.returncode == 0, (p.stdout + p.stderr)[-5000:]
    assert "data: qa.parquet (instruction): 60 documents packed into" in p.stdout
    m = [x for x in _trace(tmp_path, 0)["metrics"] if "loss" in x]
    assert len(m) == 6
    assert m[-1]["loss"] < m[0]["loss"], [x["loss"] for x in m]
    assert all(0 <= x["padding_ratio"] < 1 for x in m)
