"""A streamed set in-process: split across ranks without duplicates, and resumed from a
saved position without repeating or skipping a row."""

from __future__ import annotations

from tuner.runtime.data_sources.driver import rank_data

from tests.data.data_helpers import family, settings
from tests.tiny_chat_llama import chat_rows, write_jsonl


def _stream(tmp_path, tiny_model, rank, world):
    fam = family(tmp_path, settings(tiny_model, path="c.jsonl", streaming=True, seq_len=128), rank=rank, world=world)
    data = rank_data(fam)
    assert data.val is None and data.streamed and fam.stream is data.train
    return fam, data.train


def _keys(rows):
    return [tuple(r["input_ids"]) for r in rows]


def _docs(rows) -> list[tuple]:
    """Every document of packed rows: the segments where position ids restart, padding cut off."""
    out = []
    for r in rows:
        real = r["real"][0]
        starts = [j for j, p in enumerate(r["position_ids"][:real]) if p == 0] + [real]
        out += [tuple(r["input_ids"][a:b]) for a, b in zip(starts, starts[1:])]
    return sorted(out)


def test_ranks_read_disjoint_parts_that_cover_the_stream(tmp_path, tiny_model):
    write_jsonl(tmp_path / "c.jsonl", chat_rows(40))
    alone = _docs(_stream(tmp_path, tiny_model, 0, 1)[1])
    parts = [_docs(_stream(tmp_path, tiny_model, r, 2)[1]) for r in (0, 1)]
    assert len(alone) == 40 and parts[0] and parts[1]
    assert not set(parts[0]) & set(parts[1]), "no document on both ranks"
    assert sorted(parts[0] + parts[1]) == alone, "together the ranks read every document once"


def test_resume_from_a_saved_position_neither_repeats_nor_skips(tmp_path, tiny_model):
    write_jsonl(tmp_path / "c.jsonl", chat_rows(40))
    _, straight = _stream(tmp_path, tiny_model, 1, 2)
    everything = _keys(straight)
    fam, first = _stream(tmp_path, tiny_model, 1, 2)
    it = iter(first)
    taken = [tuple(next(it)["input_ids"]) for _ in range(5)]
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    fam.save_state(ckpt, None)
    fam2, resumed = _stream(tmp_path, tiny_model, 1, 2)
    fam2.load_state(ckpt, None)
    rest = _keys(resumed)
    assert taken + rest == everything
    assert resumed.epoch == 1 and resumed.position == 0, "the epoch ended and the next starts at its beginning"
