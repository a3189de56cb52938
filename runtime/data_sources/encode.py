"""Causal-LM rows of any format -> (input_ids, labels), and the format of a data set.

Formats (``data.format``, or recognised from the columns, names mappable in ``[data]``):

* ``chat``: ``messages`` (a list of ``{role, content}``) through the chat template; loss on
  the assistant turns (`chat.py`).
* ``instruction``: ``prompt`` and ``completion``, strings (joined as text, end-of-text
  appended) or message lists (trl's conversational prompt/completion, through the
  template); loss on the completion.
* ``text``: raw text, end-of-text appended; loss on every token.

``data.completion_only_loss = false`` trains on every token of chat and instruction rows.
"""

from __future__ import annotations

from typing import Any

from .chat import check_messages, encode_chat, encode_spans, render
from .errors import DataError

FORMATS = ("chat", "instruction", "text")


def columns_of(settings_data) -> dict[str, str]:
    d = settings_data
    return {"text": d.text_column, "messages": d.messages_column, "prompt": d.prompt_column,
            "completion": d.completion_column}


def detect_format(columns: list[str], settings_data, where: str) -> str:
    """The format `data.format` states, or the one the columns show."""
    cols = columns_of(settings_data)
    stated = settings_data.format
    need = {"chat": [cols["messages"]], "instruction": [cols["prompt"], cols["completion"]], "text": [cols["text"]]}
    if stated in need:
        missing = [c for c in need[stated] if c not in columns]
        if missing:
            raise DataError(where, f"data.format = {stated!r} needs column(s) {', '.join(map(repr, missing))}; the data has "
                            f"{', '.join(map(repr, columns))}", _mapping_fix())
        return stated
    if stated == "pairs":
        raise DataError(where, "data.format = 'pairs' is for embedding models", "use chat, instruction, text or auto")
    for fmt in ("chat", "instruction", "text"):
        if all(c in columns for c in need[fmt]):
            return fmt
    raise DataError(where, f"cannot tell the format from the columns ({', '.join(map(repr, columns))})",
                    _mapping_fix())


def _mapping_fix() -> str:
    return ("name the columns in [data]: messages_column (chat), prompt_column and completion_column (instruction) "
            "or text_column (raw text), or state data.format")


class Encoder:
    """Encodes rows of one format; callable as a batched `datasets.map` function."""

    def __init__(self, tok, fmt: str, settings_data, label: str, row_offset: int = 0) -> None:
        self.tok, self.fmt, self.label = tok, fmt, label
        self.cols = columns_of(settings_data)
        self.masked = bool(settings_data.completion_only_loss) and fmt != "text"
        self.row_offset = row_offset
        if fmt in ("chat",) and not getattr(tok, "chat_template", None):
            raise DataError(label, "chat rows need a chat template, and the tokenizer has none",
                            "give one in data.chat_template (Jinja text or a .jinja file)")
        if self.masked and not getattr(tok, "is_fast", False):
            raise DataError(label, "masking prompts needs a fast tokenizer (offset mapping)",
                            "save the tokenizer as tokenizer.json, or set data.completion_only_loss = false")

    def where(self, i: int) -> str:
        return f"{self.label}: row {i + 1 + self.row_offset}"

    def one(self, row: dict[str, Any], i: int) -> tuple[list[int], list[int]]:
        where = self.where(i)
        if self.fmt == "chat":
            msgs = check_messages(row.get(self.cols["messages"]), where, self.cols["messages"])
            return encode_chat(self.tok, msgs, where, self.masked)
        if self.fmt == "instruction":
            return self._instruction(row.get(self.cols["prompt"]), row.get(self.cols["completion"]), where)
        text = row.get(self.cols["text"])
        if not isinstance(text, str):
            raise DataError(where, f"column {self.cols['text']!r} is {type(text).__name__}, not a string",
                            "give every row its text as a string (or map the column with data.text_column)")
        return self._with_eos(self.tok(text, add_special_tokens=False)["input_ids"])

    def _with_eos(self, ids: list[int], labels: list[int] | None = None) -> tuple[list[int], list[int]]:
        ids = list(ids)
        labels = list(ids) if labels is None else list(labels)
        eos = self.tok.eos_token_id
        if eos is not None and (not ids or ids[-1] != eos):
            ids.append(eos)
            labels.append(eos)
        return ids, labels

    def _instruction(self, prompt: Any, completion: Any, where: str) -> tuple[list[int], list[int]]:
        pc, cc = self.cols["prompt"], self.cols["completion"]
        if isinstance(prompt, list) and isinstance(completion, list):  # conversational prompt/completion
            p = check_messages(prompt, where, pc)
            c = check_messages(completion, where, cc)
            before = render(self.tok, p, where, generation_prompt=True)
            full = render(self.tok, p + c, where)
            if not full.startswith(before):
                raise DataError(where, "the chat template does not render the prompt as a prefix of prompt + completion",
                                "set data.completion_only_loss = false or give data.chat_template")
            return encode_spans(self.tok, full, [(len(before), len(full))], self.masked)
        for name, v in ((pc, prompt), (cc, completion)):
            if not isinstance(v, str):
                raise DataError(where, f"column {name!r} is {type(v).__name__}, not a string",
                                "give prompt and completion as strings (or both as message lists)")
        full = prompt + completion
        ids, labels = encode_spans(self.tok, full, [(len(prompt), len(full))], self.masked)
        if self.tok.bos_token_id is not None and getattr(self.tok, "add_bos_token", False):
            ids, labels = [self.tok.bos_token_id, *ids], [-100, *labels]
        return self._with_eos(ids, labels)

    def __call__(self, batch: dict[str, list], indices: list[int]) -> dict[str, list]:
        keys = list(batch)
        out: dict[str, list] = {"input_ids": [], "labels": [], "length": []}
        for j, i in enumerate(indices):
            ids, labels = self.one({k: batch[k][j] for k in keys}, i)
            out["input_ids"].append(ids)
            out["labels"].append(labels)
            out["length"].append(len(ids))
        return out
