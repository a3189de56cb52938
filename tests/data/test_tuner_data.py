"""`tuner data SETTINGS`: the first rows as the trainer sees them (loss mask, position ids)."""

from __future__ import annotations

import json

from tests.conftest import run_tuner
from tests.runtime.runtime_helpers import to_toml, tuner_env
from tests.tiny_chat_llama import chat_rows, write_jsonl


def _project(tmp_path, tiny_model, **data):
    write_jsonl(tmp_path / "chat.jsonl", chat_rows(30))
    (tmp_path / "settings.toml").write_text(to_toml({
        "model": {"family": "causal_lm", "path": str(tiny_model)},
        "hardware": {"platform": "cpu", "num_processes": 2},
        "data": {"path": "chat.jsonl", "seq_len": 256, **data}}))
    return tmp_path / "settings.toml"


def test_json_shows_masked_labels_and_restarting_position_ids(tmp_path, tiny_model):
    from transformers import AutoTokenizer

    settings = _project(tmp_path, tiny_model)
    p = run_tuner("data", str(settings), "--rows", "2", "--json", cwd=tmp_path, env=tuner_env(), timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    st = out["stats"]
    assert st["format"] == "chat" and st["documents"] == 30 and st["packed"] is True
    assert st["rows"] > 0 and 0 <= st["padding_ratio"] < 1 and st["dropped_for_length"] == 0
    assert len(out["rows"]) == 2
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    for row in out["rows"]:
        ids, labels, pos = row["input_ids"], row["labels"], row["position_ids"]
        assert len(ids) == len(labels) == len(pos) == 256
        starts = [j for j, x in enumerate(pos[: row["real"]]) if x == 0]
        assert len(starts) >= 2 and all(labels[j] == -100 for j in starts), "a document starts at each zero"
        assert all(pos[j] == pos[j - 1] + 1 for j in range(1, row["real"]) if j not in starts)
        trained = tok.decode([t for t, lab in zip(ids, labels) if lab != -100])
        masked = tok.decode([t for t, lab in zip(ids, labels) if lab == -100])
        assert "You are a helpful model." in masked and "You are a helpful model." not in trained
        assert "<|im_start|>user" in masked
        assert trained.count("<|im_end|>") >= 2 and "<|im_start|>" not in trained


def test_text_output_marks_the_trained_tokens(tmp_path, tiny_model):
    settings = _project(tmp_path, tiny_model, packing=False)
    p = run_tuner("data", str(settings), "--rows", "1", cwd=tmp_path, env=tuner_env(), timeout=300)
    assert p.returncode == 0, p.stderr
    assert "format: chat" in p.stdout and "padded rows (packing off)" in p.stdout
    assert "<|im_start|>assistant\n[" in p.stdout and "<|im_end|>\n]" in p.stdout


def test_bad_data_exits_2_naming_the_fix(tmp_path, tiny_model):
    settings = _project(tmp_path, tiny_model, path="HuggingFaceH4/ultrachat_200k")
    p = run_tuner("data", str(settings), cwd=tmp_path, env=tuner_env(), timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "tuner downloads nothing" in p.stderr and "huggingface-cli download" in p.stderr
