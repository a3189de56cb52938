"""Helpers of the data-layer tests: data written in each source format (`write_format`), settings
for a project folder, the family built in-process."""

from __future__ import annotations

import csv
import re
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


def data_tokenizer(fam):
    """The tokenizer the data driver encodes with (``data.chat_template`` set on it when given)."""
    from tuner.runtime.data_sources.driver import text_pipeline

    return text_pipeline(fam.data_recipe(), fam.settings, fam.ctx.base_dir).tok


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


IGNORE = -100


def documents(traces: list[dict], pad_id: int) -> list[tuple[list[int], list[int]]]:
    """(input ids, labels) of every document the ranks trained (or the piece of one that a row
    holds): each row's real tokens, cut where its position ids restart at 0."""
    docs: list[tuple[list[int], list[int]]] = []
    for t in traces:
        for b in t["batches"]:
            for ids, labels, pos in zip(b["input_ids"], b["labels"], b["position_ids"], strict=True):
                for i, lab, n in zip(ids, labels, pos, strict=True):
                    if i == pad_id:
                        continue
                    if n == 0:
                        docs.append(([], []))
                    docs[-1][0].append(i)
                    docs[-1][1].append(lab)
    return docs


def check_trained(traces: list[dict], fmt: str, tok, rows: list[dict]) -> list[str]:
    """Every document the ranks trained is one of `rows` read as `fmt`, and its labels are that
    format's loss mask: raw text, every token but the first; chat, exactly the assistant turns
    (content and end of turn); instruction, exactly the completion and end of text. The
    documents' text."""
    if fmt == "chat":
        whole = {tok.apply_chat_template(r["messages"], tokenize=False) for r in rows}
    elif fmt == "instruction":
        whole = {r["prompt"] + r["completion"] + tok.eos_token for r in rows}
    else:
        whole = {r["text"] + tok.eos_token for r in rows}
    docs = documents(traces, tok.pad_token_id)
    assert docs
    texts = []
    for ids, labels in docs:
        text = tok.decode(ids)
        texts.append(text)
        assert labels[0] == IGNORE, "a document's first token is no target"
        assert all(lab in (IGNORE, i) for i, lab in zip(ids, labels, strict=True))
        trained = tok.decode([i for i, lab in zip(ids, labels, strict=True) if lab != IGNORE])
        if fmt == "text":  # wrapped: a row may hold a piece of a document
            assert any(text in w for w in whole), text
            assert labels[1:] == ids[1:], "raw text: every token is a target"
        elif fmt == "chat":
            assert text in whole, text
            assert trained == "".join(re.findall(r"<\|im_start\|>assistant\n(.*?<\|im_end\|>\n)", text, re.S)), text
        else:
            assert text in whole, text
            assert trained == text.split("\nAnswer:", 1)[1], text
    return texts
