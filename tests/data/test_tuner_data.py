"""`tuner data SETTINGS`: the first rows as the trainer sees them (loss mask, position ids).

`tuner data` starts no rank: the JSON and text views run the command line's own entry
(`tuner.commands.cli.main`) in-process, the code path of the `tuner` executable; the refusal of
data it cannot read runs the real executable, for its exit status and its stderr without a
traceback."""

from __future__ import annotations

import json

from tuner.commands.cli import main as tuner_main

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


def _tuner(capsys, monkeypatch, cwd, *args: str) -> tuple[int, str, str]:
    """`tuner ARGS` in-process, in `cwd`: (exit code, stdout, stderr)."""
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    code = tuner_main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_shows_masked_labels_and_restarting_position_ids(tmp_path, tiny_model, capsys, monkeypatch):
    from transformers import AutoTokenizer

    settings = _project(tmp_path, tiny_model)
    code, stdout, stderr = _tuner(capsys, monkeypatch, tmp_path, "data", str(settings), "--rows", "2", "--json")
    assert code == 0, stderr
    out = json.loads(stdout)
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


def test_text_output_marks_the_trained_tokens(tmp_path, tiny_model, capsys, monkeypatch):
    settings = _project(tmp_path, tiny_model, packing=False)
    code, stdout, stderr = _tuner(capsys, monkeypatch, tmp_path, "data", str(settings), "--rows", "1")
    assert code == 0, stderr
    assert "format: chat" in stdout and "padded rows (packing off)" in stdout
    assert "<|im_start|>assistant\n[" in stdout and "<|im_end|>\n]" in stdout


def test_bad_data_exits_2_naming_the_fix(tmp_path, tiny_model):
    settings = _project(tmp_path, tiny_model, path="HuggingFaceH4/ultrachat_200k")
    p = run_tuner("data", str(settings), cwd=tmp_path, env=tuner_env(), timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "tuner downloads nothing" in p.stderr and "huggingface-cli download" in p.stderr
