"""Parsing what tuner reads as configuration, without touching a file: JSON and YAML text ->
values, with the refusals every reader shares (`compiler/read/files.py` reads the bytes, then
parses here):

* JSON with ``NaN``/``Infinity`` (not JSON; Python's parser accepts them by default), or a
  string holding a lone surrogate escape;
* nesting deeper than `MAX_DEPTH` (Python's parsers and everything after them recurse, so a
  hostile file would end in RecursionError), or a YAML alias reusing a table;
* `FileError`, the one exception for a file (or a text) tuner cannot use.

Pure Python, no torch, no I/O: every stage may use it.
"""

from __future__ import annotations

import json
import math
from typing import Any

#: Deeper nesting than this is refused: real configs nest a handful of levels.
MAX_DEPTH = 64


class FileError(Exception):
    """A file cannot be used; `message` is one complete sentence naming it."""

    def __init__(self, message: str, missing: bool = False, content: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.missing = missing
        """True when the file does not exist (some callers treat that as 'not given')."""
        self.content = content
        """True when the file was read but what it holds is unusable (not UTF-8, bad
        JSON/YAML, too deep); False for I/O problems (missing, unreadable, special, too big)."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str, where: str) -> Any:
    """JSON text -> value; FileError for invalid JSON, NaN/Infinity or too deep nesting."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise FileError(f"{where}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}", content=True) from None
    except ValueError as exc:
        raise FileError(f"{where}: invalid JSON: {exc}", content=True) from None
    except RecursionError:
        raise FileError(f"{where}: nested more than {MAX_DEPTH} levels deep", content=True) from None
    check_depth(value, where)
    if "\\u" in text and (bad := _lone_surrogate(value)) is not None:
        raise FileError(f"{where}: {bad} holds a lone surrogate escape (\\ud800-\\udfff without its pair): not a "
                        "character, and no UTF-8 file can hold it", content=True)
    return value


def _lone_surrogate(value: Any) -> str | None:
    """Where the first string (or key) holding a lone UTF-16 surrogate is, else None: JSON's
    ``\\udc80`` escape decodes to one, which cannot be encoded again."""
    stack: list[tuple[Any, str]] = [(value, "<value>")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str) and not node.isascii():
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return where
        elif isinstance(node, dict):
            stack.extend((k, where) for k in node)
            stack.extend((v, str(k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, where) for v in node)
    return None


def parse_yaml(text: str, where: str) -> Any:
    """YAML text -> value (safe loader); FileError for invalid YAML or too deep nesting."""
    import yaml

    try:
        # libyaml's parser where PyYAML has it: the pure-Python one took ~7 s per MB
        value = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):  # libyaml's own bound (1000 levels)
            raise FileError(f"{where}: nested more than {MAX_DEPTH} levels deep", content=True) from None
        raise FileError(f"{where}: invalid YAML: {exc}", content=True) from None
    except RecursionError:
        raise FileError(f"{where}: nested more than {MAX_DEPTH} levels deep", content=True) from None
    check_depth(value, where)
    return value


def nesting_problem(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """Why `value` is unsafe to process recursively, or None. Counted without recursion.

    Too deep: more than `limit` levels of dicts/lists. Shared: one dict/list reached twice,
    which only a YAML alias (``*name``) produces; a self-referencing one would recurse
    forever and a chain of them expands exponentially, so configuration files may not.
    """
    stack = [(value, 1)]
    seen: set[int] = set()
    while stack:
        node, level = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        if level > limit:
            return f"nested more than {limit} levels deep"
        if id(node) in seen:
            return "reuses a table or list through a YAML alias (*name); write the values out"
        seen.add(id(node))
        stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return None


def check_depth(value: Any, where: str, limit: int = MAX_DEPTH) -> None:
    problem = nesting_problem(value, limit)
    if problem:
        raise FileError(f"{where}: {problem}", content=True)


def non_finite(value: Any, path: str = "") -> str | None:
    """The key path of the first NaN or infinite float inside `value`, else None."""
    stack = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return where or "<value>"
        if isinstance(node, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
    return None
