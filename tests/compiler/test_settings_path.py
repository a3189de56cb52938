"""Following the settings through a compile, from `compile_text`: every example's settings
enter at most 16 of tuner's modules and come back at most 8 times to a module the compile had
already left (tests/compiler/settings_path.py says what counts; `python -m
tests.compiler.settings_path` prints the figures). Before round 3 (counted the same way) the
examples entered 14 to 16 modules and came back 19 to 27 times: the memory estimate went back
into its per-rank and activation modules once per compared strategy, the DeepSpeed build into
its offload module per block, the compile into emit after the cluster files. Now: 14 to 16
entered, 0 to 5 returns (the DeepSpeed examples: the rules ask the memory estimate for the
NVMe need before the plan exists, and the review runs the estimate again for the plan).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tuner.compiler.compile import compile_text
from tuner.compiler.parse import parse_json

from tests.compiler.settings_path import compile_path, follow

REPO = Path(__file__).resolve().parents[2]
MAX_ENTERED, MAX_RETURNS = 16, 8


@pytest.mark.parametrize("example", sorted((REPO / "examples").glob("*.toml")), ids=lambda p: p.stem)
def test_the_settings_take_a_short_straight_path(example):
    result, path = compile_path(example)
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    assert path.entered[:3] == ["compiler/compile.py", "compiler/read/source.py", "compiler/gather.py"], path.entered
    assert len(path.entered) <= MAX_ENTERED, path.entered
    assert len(path.returns) <= MAX_RETURNS, path.returns


def test_the_count_sees_a_return():
    """Not vacuous: a second compile of the same text, in the same followed run, goes back into
    every module the first one left; a call that gets no settings is not followed."""
    text = (REPO / "examples" / "zero3_nvme.toml").read_text(encoding="utf-8")
    _, once = follow(lambda: compile_text(text), text)
    _, twice = follow(lambda: (compile_text(text), compile_text(text)), text)
    assert twice.entered == once.entered
    assert len(twice.returns) >= len(once.returns) + len(once.entered) - 1
    _, none = follow(lambda: parse_json('{"zero_optimization": {"stage": 3}}', "ds.json"), text)
    assert none.entered == []
