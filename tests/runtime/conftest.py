"""Fixtures for runtime tests (helpers live in runtime_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def runtime_tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runtime")
