"""Embedding pairs and triplets from any `datasets` source: sentence-transformers' anchor /
positive / negative columns, negative_1..k columns, hard-negative lists, mapped columns."""

from __future__ import annotations

import pytest


def test_sentence_transformers_columns_from_parquet(tmp_path):
    from datasets import Dataset
    from tuner.runtime.data_sources.pairs import read_pairs

    Dataset.from_list([{"anchor": f"q{i}", "positive": f"p{i}", "negative": f"n{i}"} for i in range(5)]
                      ).to_parquet(str(tmp_path / "triplets.parquet"))
    rows = read_pairs(tmp_path / "triplets.parquet")
    assert rows[2] == {"query": "q2", "positive": "p2", "negatives": ["n2"]}
    Dataset.from_list([{"anchor": f"q{i}", "positive": f"p{i}", "negative_1": f"a{i}", "negative_2": f"b{i}"}
                       for i in range(3)]).to_parquet(str(tmp_path / "hard.parquet"))
    assert read_pairs(tmp_path / "hard.parquet")[1]["negatives"] == ["a1", "b1"]


def test_mapped_columns_and_hard_negative_lists(tmp_path):
    from tuner.compiler.keys.settings import Settings
    from tuner.runtime.data_sources.pairs import read_pairs

    (tmp_path / "p.csv").write_text("question,answer\nwhat,that\nwho,them\n")
    s = Settings.from_dict({"data": {"anchor_column": "question", "positive_column": "answer"}})
    assert read_pairs(tmp_path / "p.csv", s.data) == [{"query": "what", "positive": "that", "negatives": []},
                                                      {"query": "who", "positive": "them", "negatives": []}]
    (tmp_path / "n.jsonl").write_text('{"query": "a", "positive": "b", "negatives": ["c", "d"]}\n')
    assert read_pairs(tmp_path / "n.jsonl")[0]["negatives"] == ["c", "d"]


def test_wrong_shapes_name_the_row(tmp_path):
    from tuner.runtime.families.base import FamilyError
    from tuner.runtime.data_sources.pairs import read_pairs

    (tmp_path / "n.jsonl").write_text('{"query": "a", "positive": "b"}\n{"query": "a", "positive": 3}\n')
    with pytest.raises(FamilyError, match=r"n.jsonl: row 2: column 'positive' is int, not a string"):
        read_pairs(tmp_path / "n.jsonl")
