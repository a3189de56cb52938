"""Fixtures for the compiler's tests.

`tuner import` reads HF Trainer / ms-swift argument files with transformers' own
HfArgumentParser in a subprocess (`python -m tuner.runtime.hf_args`; the compiler imports no
transformers), which costs a fresh interpreter importing transformers and torch: ~10 s on
the 2-core machine, a minute under load, per distinct file. In these in-process tests the
same parser function (`tuner.runtime.hf_args.parse`) answers in this process instead, its
answer passed through JSON as the subprocess's is. The subprocess itself is exercised by the
tests marked ``hf_parser_subprocess`` and by every `tuner import` run on the command line.
"""

from __future__ import annotations

import json
from typing import Any

import pytest


def parse_in_process(text: str) -> dict[str, Any]:
    from tuner.runtime.hf_args import parse

    try:
        answer = parse(json.loads(text))
    except Exception as exc:  # noqa: BLE001 - as hf_args.main reports it
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    return json.loads(json.dumps(answer, default=str))


@pytest.fixture(autouse=True)
def _hf_parser_in_process(request, monkeypatch):
    if request.node.get_closest_marker("hf_parser_subprocess") is None:
        from tuner.compiler.formats import hf_trainer

        monkeypatch.setattr(hf_trainer, "_parse_upstream", parse_in_process)
