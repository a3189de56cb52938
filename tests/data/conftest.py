"""Fixtures of the data-layer tests: the tiny chat Llama (built once per session) and a
`datasets` cache of the session's own (set before `datasets` is imported)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="tuner-data-tests-hf-"))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from tests.tiny_chat_llama import build_tiny_chat_llama

    return build_tiny_chat_llama(tmp_path_factory.mktemp("model") / "tiny-chat-llama")
