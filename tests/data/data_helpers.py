"""Helpers of the data-layer tests: data written in each source format (`write_format`), settings
for a project folder, the family built in-process."""

from __future__ import annotations

import csv
from pathlib import Path

from tests.tiny_chat_llama import chat_rows, sentences, write_jsonl


def settings(model: Path, **data):
    from tuner.compiler.keys.settings import Settings

    data = {"seq_len": 64, "validation_split": 0.0, **data}
    return Settings.from_dict({"model": {"path": str(model)}, "data": data})


def family(project: Path, s, rank: int = 0, world: int = 1):
    from tuner.runtime.families.base import FamilyContext
    from tuner.runtime.families.causal_lm import CausalLMFamily

    return CausalLMFamily(FamilyContext(settings=s, base_dir=project, rank=rank, world_size=world))


def instruction_rows(n: int, seed: int = 3) -> list[dict]:
    s = sentences(2 * n, seed=seed)
    return [{"prompt": f"Question: {s[2 * i]}\nAnswer:", "completion": " " + s[2 * i + 1]} for i in range(n)]


def text_rows(n: int) -> list[dict]:
    return [{"text": t} for t in sentences(n, seed=5)]


KINDS = ["jsonl-text", "jsonl-chat", "jsonl-instruction", "parquet-chat", "csv-mapped-instruction",
         "save_to_disk-split", "arrow-text", "txt-lines", "glob-shards"]


def source_rows(kind: str) -> list[dict]:
    """The rows `write_format(kind, ...)` writes (a save_to_disk folder: its "sft" split)."""
    if kind.endswith("-text") or kind == "txt-lines":
        return text_rows(40)
    if kind.endswith("-instruction"):
        return instruction_rows(30)
    if kind == "save_to_disk-split":
        return chat_rows(24, seed=1)
    if kind in ("jsonl-chat", "parquet-chat", "glob-shards"):
        return chat_rows(24)
    raise AssertionError(kind)


def write_format(kind: str, d: Path) -> tuple[dict, str]:
    """Write `source_rows(kind)` into `d` as `kind`; (data settings, expected format)."""
    from datasets import Dataset, DatasetDict

    rows = source_rows(kind)
    if kind == "jsonl-text":
        write_jsonl(d / "t.jsonl", rows)
        return {"path": "t.jsonl"}, "text"
    if kind == "jsonl-chat":
        write_jsonl(d / "c.jsonl", rows)
        return {"path": "c.jsonl"}, "chat"
    if kind == "jsonl-instruction":
        write_jsonl(d / "i.jsonl", rows)
        return {"path": "i.jsonl"}, "instruction"
    if kind == "parquet-chat":
        Dataset.from_list(rows).to_parquet(str(d / "c.parquet"))
        return {"path": "c.parquet"}, "chat"
    if kind == "csv-mapped-instruction":  # columns named otherwise, mapped in the settings
        with open(d / "qa.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["question", "answer"])
            w.writerows([[r["prompt"], r["completion"]] for r in rows])
        return {"path": "qa.csv", "prompt_column": "question", "completion_column": "answer"}, "instruction"
    if kind == "save_to_disk-split":
        DatasetDict({"train": Dataset.from_list(chat_rows(4)), "sft": Dataset.from_list(rows)}
                    ).save_to_disk(str(d / "saved"))
        return {"path": "saved", "split": "sft"}, "chat"
    if kind == "arrow-text":
        Dataset.from_list(rows).save_to_disk(str(d / "arr"))
        arrow = next((d / "arr").glob("*.arrow"))
        arrow.rename(d / "t.arrow")
        return {"path": "t.arrow"}, "text"
    if kind == "txt-lines":
        (d / "t.txt").write_text("\n".join(r["text"] for r in rows) + "\n", encoding="utf-8")
        return {"path": "t.txt"}, "text"
    if kind == "glob-shards":
        (d / "shards").mkdir()
        write_jsonl(d / "shards" / "a.jsonl", rows[:12])
        write_jsonl(d / "shards" / "b.jsonl", rows[12:])
        return {"files": ["shards/*.jsonl"]}, "chat"
    raise AssertionError(kind)
