"""Each source format's rows as tuner run's ranks receive them, in-process (no rank): the family
that every rank builds reads the file, masks and packs it; the rows are collated into batches
as the trainer does, and checked with the 2-rank run's assertions (tests/data/test_data_runs.py,
which launches chat (streamed) and parquet instruction data only): the run's "data: FILE (FORMAT)" line (the data driver's `check_data`, what
`tuner run` prints before any rank starts), every trained document one of the file's rows, and
its format's exact loss mask (raw text: every token but a document's first; chat: exactly the
assistant turns; instruction: exactly the completion), with packed rows' position ids."""

from __future__ import annotations

import pytest
from tuner.runtime.data_sources.driver import check_data, rank_data

from tests.data.data_helpers import check_trained, family, settings, source_rows, write_format

#: (format, data.seq_len): the launches' round lengths (the smallest that holds the longest
#: document: instruction 37 tokens, chat 112; raw text wraps)
FORMATS = [("jsonl-text", 16), ("jsonl-chat", 112), ("jsonl-instruction", 40), ("csv-mapped-instruction", 40),
           ("save_to_disk-split", 112)]


@pytest.fixture(scope="module")
def tok(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model))


def _batches(data, micro: int = 2) -> dict:
    """The rows in trainer batches (collated as the ranks collate them), in row_trace.py's form."""
    batches, train = [], data.train
    for start in range(0, len(train) - micro + 1, micro):
        b = data.collate([train[i] for i in range(start, start + micro)])
        batches.append({"input_ids": b["input_ids"].tolist(), "labels": b["labels"].tolist(),
                        "position_ids": b["position_ids"].tolist(), "has_position_ids": "position_ids" in b})
    return {"batches": batches}


@pytest.mark.parametrize(("kind", "seq_len"), FORMATS, ids=[k for k, _ in FORMATS])
def test_each_format_gives_the_rows_the_ranks_train(kind, seq_len, tmp_path, tiny_model, tok):
    data, fmt = write_format(kind, tmp_path)
    fam = family(tmp_path, settings(tiny_model, **data, seq_len=seq_len))
    line = check_data(fam)
    assert line.startswith(f"data: {data['path'] if 'path' in data else data['files'][0]} ({fmt}): "), line
    assert "dropped" not in line, "data.seq_len holds every document"
    trace = _batches(rank_data(fam))
    assert trace["batches"] and all(b["has_position_ids"] for b in trace["batches"]), "packed rows"
    texts = check_trained([trace], fmt, tok, source_rows(kind))
    if fmt == "chat":
        assert any("<|im_start|>system" in x for x in texts), "a row with a system prompt is trained"
        assert any(x.count("<|im_start|>assistant") > 1 for x in texts), "a multi-turn row is trained"
