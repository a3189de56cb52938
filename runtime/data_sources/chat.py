"""A conversation through the tokenizer's own chat template, with the loss mask of its
assistant turns.

Most real templates (Llama 3, Qwen, ChatML) have no ``{% generation %}`` markers, so the mask
is found as trl and axolotl find it: render the conversation turn by turn and compare. For
each assistant message *i*, the text of ``messages[:i]`` with the generation prompt is a prefix
of the text of ``messages[:i+1]``, which is a prefix of the whole conversation; the characters
between the two are that turn (its content and end-of-turn tokens). The whole conversation is
tokenised once (so the ids are exactly what the template gives) and a token is trained on when
its characters fall inside an assistant span (fast tokenizers' offset mapping).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import DataError

ROLES_HINT = "each message is {\"role\": \"system\"|\"user\"|\"assistant\", \"content\": \"...\"}"


def load_template(value: str, base_dir: Path) -> str:
    """``data.chat_template``: inline Jinja, or a path to a file holding it."""
    value = value.strip()
    if not value or "{" in value:
        return value
    p = Path(value).expanduser()
    p = p if p.is_absolute() else base_dir / p
    try:
        return p.read_text(encoding="utf-8")
    except OSError as exc:
        raise DataError(f"data.chat_template {value!r}", f"cannot read the template file ({exc.strerror or exc})",
                        "give the Jinja text inline or a readable .jinja file") from None


def check_messages(messages: Any, where: str, column: str) -> list[dict[str, str]]:
    """The conversation as a list of {role, content} strings, or a DataError naming the row."""
    if not isinstance(messages, list) or not messages:
        raise DataError(where, f"column {column!r} must be a non-empty list of messages, not "
                        f"{type(messages).__name__}", ROLES_HINT)
    out = []
    for k, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise DataError(where, f"{column}[{k}] is not a {{role, content}} object", ROLES_HINT)
        if not isinstance(m["role"], str):
            raise DataError(where, f"{column}[{k}].role is {type(m['role']).__name__}, not a string", ROLES_HINT)
        if not isinstance(m["content"], str):
            raise DataError(where, f"{column}[{k}].content is {type(m['content']).__name__}, not a string",
                            "write the message text as a string")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def render(tok, messages: list[dict[str, str]], where: str, generation_prompt: bool = False) -> str:
    try:
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    except Exception as exc:  # noqa: BLE001 - jinja2's TemplateError, or a raise_exception in the template
        roles = ", ".join(m["role"] for m in messages)
        raise DataError(where, f"the chat template refuses this conversation (roles: {roles}): {exc}",
                        "fix the row's roles/order, or give a template that accepts them in data.chat_template") from None


def assistant_spans(tok, messages: list[dict[str, str]], where: str) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character spans of its assistant turns."""
    full = render(tok, messages, where)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before = render(tok, messages[:i], where, generation_prompt=True) if i else ""
        through = render(tok, messages[: i + 1], where)
        if not (through.startswith(before) and full.startswith(through)):
            raise DataError(where, "the chat template does not render this conversation turn by turn as a prefix of "
                            "the whole (it rewrites earlier turns), so the assistant turns cannot be found",
                            "set data.completion_only_loss = false, or give a template that renders turns in order "
                            "in data.chat_template")
        spans.append((len(before), len(through)))
    return full, spans


def encode_chat(tok, messages: list[dict[str, str]], where: str, masked: bool) -> tuple[list[int], list[int]]:
    """(input_ids, labels) of a conversation; labels -100 outside assistant turns when `masked`."""
    full, spans = assistant_spans(tok, messages, where) if masked else (render(tok, messages, where), [])
    if masked and not spans:
        raise DataError(where, "the conversation has no assistant message, so nothing would be trained",
                        "add the assistant's answer, or set data.completion_only_loss = false")
    return encode_spans(tok, full, spans, masked)


def encode_spans(tok, text: str, spans: list[tuple[int, int]], masked: bool) -> tuple[list[int], list[int]]:
    """Tokenise rendered text once (it carries its own special tokens) and label the tokens
    inside `spans` (all tokens when not `masked`)."""
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=masked)
    ids = list(enc["input_ids"])
    if not masked:
        return ids, list(ids)
    labels = [-100] * len(ids)
    for j, (a, b) in enumerate(enc["offset_mapping"]):
        if any(a < e and b > s for s, e in spans) or (a == b and any(s <= a < e for s, e in spans)):
            labels[j] = ids[j]
    return ids, labels
