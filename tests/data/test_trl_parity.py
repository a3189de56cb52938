"""Parity with trl: the same chat data, model and step give the same loss at step 1 under trl's
SFTTrainer and under `tuner run` (same tokens, same masking). Tolerance: 1e-4 absolute (float32
on CPU; the two sum the same per-token losses in a different order)."""

from __future__ import annotations

import json
import os

import pytest

from tests import harness
from tests.runtime.runtime_helpers import to_toml
from tests.tiny_chat_llama import chat_rows, write_jsonl

TOLERANCE = 1e-4
ROWS = 4  # one batch holds every row, so the samplers' orders do not matter


def _trl_step1_loss(model_dir, rows, out, **cfg) -> float:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    args = SFTConfig(output_dir=str(out), max_steps=1, per_device_train_batch_size=ROWS, learning_rate=1e-9,
                     logging_steps=1, save_strategy="no", report_to=[], max_length=512, packing=False,
                     bf16=False, use_cpu=True, dataloader_num_workers=0, seed=0, **cfg)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok)
    trainer.train()
    return [h["loss"] for h in trainer.state.log_history if "loss" in h][0]


def _tuner_step1_loss(tmp_path, model_dir, rows, **data) -> float:
    write_jsonl(tmp_path / "d.jsonl", rows)
    (tmp_path / "settings.toml").write_text(to_toml({
        "model": {"family": "causal_lm", "path": str(model_dir)},
        "hardware": {"platform": "cpu", "num_processes": 1},
        "data": {"path": "d.jsonl", "seq_len": 512, "validation_split": 0.0, "packing": False, **data},
        "training": {"micro_batch_size": ROWS, "learning_rate": 1e-9, "max_steps": 1, "warmup_steps": 0,
                     "log_every": 1, "max_grad_norm": 0.0},
        "checkpoint": {"every_steps": 0, "export": False},
        "output": {"dir": "out"}}))
    p = harness.tuner('run', str(tmp_path / 'settings.toml'), cwd=tmp_path, timeout=600, env={'HF_DATASETS_CACHE': os.environ['HF_DATASETS_CACHE']})
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    metrics = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    return next(m["loss"] for m in metrics if m.get("step") == 1 and "loss" in m)


@pytest.mark.slow
def test_chat_loss_at_step_one_matches_trl(tmp_path, tiny_model):
    rows = chat_rows(ROWS)
    ours = _tuner_step1_loss(tmp_path, tiny_model, rows, completion_only_loss=False)
    theirs = _trl_step1_loss(tiny_model, rows, tmp_path / "trl")
    assert abs(ours - theirs) <= TOLERANCE, (ours, theirs)


@pytest.mark.slow
def test_prompt_completion_loss_at_step_one_matches_trl(tmp_path, tiny_model):
    """Completion-only loss (trl's default for prompt/completion data) on conversational rows."""
    rows = [{"prompt": r["messages"][:-1], "completion": r["messages"][-1:]} for r in chat_rows(ROWS, seed=2)]
    ours = _tuner_step1_loss(tmp_path, tiny_model, rows)
    theirs = _trl_step1_loss(tiny_model, rows, tmp_path / "trl")
    assert abs(ours - theirs) <= TOLERANCE, (ours, theirs)
