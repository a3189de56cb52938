"""The data layer in-process (no ranks): every source format, format detection, column
mapping, chat loss masking checked against an independent reading of the rendered text, and
packed rows with per-document position ids."""

from __future__ import annotations

import json
import re

import pytest
from tuner.runtime.data_sources.driver import check_data, rank_data

from tests.data.data_helpers import KINDS, data_tokenizer, family, settings, write_format
from tests.tiny_chat_llama import chat_rows, write_jsonl


@pytest.mark.parametrize("kind", KINDS)
def test_every_source_format_gives_packed_rows(kind, tmp_path, tiny_model):
    data, fmt = write_format(kind, tmp_path)
    fam = family(tmp_path, settings(tiny_model, **data))
    assert check_data(fam).startswith("data: ")
    data = rank_data(fam)
    train, val = data.train, data.val
    assert data.stats["format"] == fmt
    assert val is None and len(train) >= 4
    trained = masked = 0
    for i in range(len(train)):
        row = train[i]
        ids, labels, pos = row["input_ids"], row["labels"], row["position_ids"]
        assert len(ids) == len(labels) == len(pos) == 64
        for j, (t, lab, p) in enumerate(zip(ids, labels, pos)):
            assert lab in (-100, t)
            assert p == 0 or p == pos[j - 1] + 1, "position ids count up inside a document"
            if p == 0:
                assert lab == -100, "a document's first token is no target"
        trained += sum(lab != -100 for lab in labels)
        masked += sum(lab == -100 for lab in labels)
    assert trained > 0
    if fmt in ("chat", "instruction"):
        assert masked > len(train) * 8, "prompts are masked"


def test_packed_rows_restart_position_ids_at_each_document(tmp_path, tiny_model):
    """The first packed row holds whole chat documents back to back: each segment between two
    position-id zeros is exactly one encoded conversation."""
    from tuner.runtime.data_sources.encode import Encoder

    rows = chat_rows(12)
    write_jsonl(tmp_path / "c.jsonl", rows)
    s = settings(tiny_model, path="c.jsonl", seq_len=128)
    fam = family(tmp_path, s)
    data = rank_data(fam)
    train = data.train
    enc = Encoder(data_tokenizer(fam), "chat", s.data, "c.jsonl")
    docs = [enc.one(r, i)[0] for i, r in enumerate(rows)]
    row = train[0]
    starts = [j for j, p in enumerate(row["position_ids"]) if p == 0]
    assert len(starts) >= 3, "several documents share the row"
    segments = [row["input_ids"][a:b] for a, b in zip(starts, starts[1:])]
    assert segments[:2] == docs[:2]
    real = row["real"][0]
    assert row["input_ids"][real:] == [fam.tokenizer().pad_token_id] * (128 - real)
    batch = data.collate([train[0], train[1]])
    assert "attention_mask" not in batch, "packed rows rely on position ids, not a padding mask"
    assert batch["position_ids"].shape == (2, 128)


def _assistant_char_spans(text: str) -> list[tuple[int, int]]:
    """ChatML read directly: each assistant turn's content and end-of-turn."""
    return [m.span(1) for m in re.finditer(r"<\|im_start\|>assistant\n(.*?<\|im_end\|>\n)", text, re.S)]


@pytest.mark.parametrize("only_assistant", [True, False])
def test_chat_labels_are_masked_exactly_outside_assistant_turns(tmp_path, tiny_model, only_assistant):
    from tuner.runtime.data_sources.encode import Encoder

    s = settings(tiny_model, completion_only_loss=only_assistant)
    fam = family(tmp_path, s)
    tok = data_tokenizer(fam)
    assert "{% generation %}" not in tok.chat_template, "the template has no generation markers"
    conv = chat_rows(6)[4]["messages"]  # a system prompt and two user/assistant turns
    assert [m["role"] for m in conv] == ["system", "user", "assistant", "user", "assistant"]
    ids, labels = Encoder(tok, "chat", s.data, "x").one({"messages": conv}, 0)
    text = tok.apply_chat_template(conv, tokenize=False)
    pieces = [tok.decode([t]) for t in ids]
    assert "".join(pieces) == text
    spans = _assistant_char_spans(text)
    assert len(spans) == 2
    at = 0
    for t, lab, piece in zip(ids, labels, pieces):
        inside = any(a <= at and at + len(piece) <= b for a, b in spans)
        expected = t if (inside or not only_assistant) else -100
        assert lab == expected, f"token {piece!r} at char {at}"
        at += len(piece)


def test_instruction_loss_is_on_the_completion_only(tmp_path, tiny_model):
    from tuner.runtime.data_sources.encode import Encoder

    s = settings(tiny_model)
    tok = data_tokenizer(family(tmp_path, s))
    row = {"prompt": "Question: what is two plus two?\nAnswer:", "completion": " four."}
    ids, labels = Encoder(tok, "instruction", s.data, "x").one(row, 0)
    trained = tok.decode([t for t, lab in zip(ids, labels) if lab != -100])
    assert trained == " four.<|endoftext|>"
    assert tok.decode(ids) == row["prompt"] + row["completion"] + "<|endoftext|>"


def test_conversational_prompt_completion_uses_the_template(tmp_path, tiny_model):
    from tuner.runtime.data_sources.encode import Encoder

    s = settings(tiny_model)
    tok = data_tokenizer(family(tmp_path, s))
    row = {"prompt": [{"role": "user", "content": "Hello."}], "completion": [{"role": "assistant", "content": "Fine."}]}
    ids, labels = Encoder(tok, "instruction", s.data, "x").one(row, 0)
    assert tok.decode([t for t, lab in zip(ids, labels) if lab != -100]) == "Fine.<|im_end|>\n"


def test_padded_batches_when_packing_is_off(tmp_path, tiny_model):
    write_jsonl(tmp_path / "c.jsonl", chat_rows(12))
    fam = family(tmp_path, settings(tiny_model, path="c.jsonl", packing=False, seq_len=128))
    data = rank_data(fam)
    train = data.train
    assert len(train) == 12, "one conversation per row"
    batch = data.collate([train[0], train[1]])
    mask = batch["attention_mask"]
    assert mask.shape == batch["input_ids"].shape and int(mask.sum()) == int(batch["n_real"])
    assert (batch["labels"][mask == 0] == -100).all()
    assert data.stats["padding_ratio"] == 0.0


def test_a_template_from_the_settings_serves_a_tokenizer_without_one(tmp_path, tiny_model):
    import shutil

    from tests.tiny_chat_llama import CHATML

    model = tmp_path / "m"
    shutil.copytree(tiny_model, model)
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(cfg))
    for extra in model.glob("chat_template.*"):
        extra.unlink()
    write_jsonl(tmp_path / "c.jsonl", chat_rows(12))
    (tmp_path / "chatml.jinja").write_text(CHATML)
    from tuner.runtime.data_sources.errors import DataError

    with pytest.raises(DataError, match="data.chat_template"):
        rank_data(family(tmp_path, settings(model, path="c.jsonl")))
    data = rank_data(family(tmp_path, settings(model, path="c.jsonl", chat_template="chatml.jinja")))
    assert data.stats["format"] == "chat" and len(data.train) > 0


def test_tokenised_once_the_second_build_reads_the_cache(tmp_path, tiny_model):
    write_jsonl(tmp_path / "c.jsonl", chat_rows(12))
    s = settings(tiny_model, path="c.jsonl")
    first = rank_data(family(tmp_path, s)).train
    second = rank_data(family(tmp_path, s)).train
    assert first.ds.cache_files and first.ds.cache_files == second.ds.cache_files
    assert first[3] == second[3]
