"""Every schema key has a place in the wizard, and the quick start lands a 7B run on Review.

The reachability test reads the declaration, so a key another change adds later fails here
(naming it) unless the wizard shows it: `layout.advanced_keys` gives any new key a field in
the "Advanced" part of the step it declares (``step=``), else of its section's usual step.
"""

from __future__ import annotations

import json

import pytest
from tuner.compiler.compile import compile_file
from tuner.compiler.keys.schema import index
from tuner.tui.fields import FieldRow
from tuner.tui.layout import MERGED, STEPS, STRATEGY_KEYS
from tuner.tui.model import WizardState
from tuner.tui.steps import AdvancedPart, StepPane

from .conftest import make_app
from .test_wizard_behaviours import LLAMA2_7B

pytestmark = pytest.mark.tui


async def test_every_schema_key_has_a_field_on_some_step(tmp_path, _wizard_env):
    app = make_app(_wizard_env / "settings.toml", tmp_path=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        for i, step in enumerate(STEPS[:-1]):
            await pilot.press(f"f{i + 1}")
        await pilot.pause()
        for box in app.query(AdvancedPart):  # its rows are built when it first opens
            box.collapsed = False
        await pilot.pause()
        rows: dict[str, list[str]] = {}
        for pane in app.query(StepPane):
            for row in pane.query(FieldRow):
                rows.setdefault(row.key, []).append(pane.step_id)
    missing = sorted(k for k in index().keys if k not in rows and k not in STRATEGY_KEYS)
    assert not missing, f"schema keys with no place in the wizard: {missing}"
    doubled = {k: v for k, v in rows.items() if len(v) > 1}
    assert not doubled, f"keys with a field on more than one step: {doubled}"


def _scenarios(tmp_path):
    """States that between them show every conditional field."""
    edits = [
        {}, {"model.type": "lora"}, {"model.family": "embedding"}, {"model.family": "diffusion"},
        {"hardware.num_machines": 2}, {"hardware.platform": "cuda"}, {"training.ema": True},
    ]
    for strategy in ("ddp", "fsdp2", "fsdp1", "deepspeed"):
        for extra in edits + [{"fsdp.auto_wrap_policy": "size"}, {"deepspeed.offload_param": "nvme"}]:
            state = WizardState(tmp_path / "settings.toml")
            state.set_strategy(strategy)
            state.set_many(extra)
            yield state


def test_every_field_is_visible_in_some_state(tmp_path):
    shown: set[str] = set()
    for state in _scenarios(tmp_path):
        shown |= {k for k in index().keys if state.visible(k)}
    hidden = sorted(set(index().keys) - shown - STRATEGY_KEYS - set(MERGED))
    assert not hidden, f"schema keys whose field never shows: {hidden}"
    # A merged key shows where a file sets it (so it can be turned off there).
    state = WizardState(tmp_path / "s.toml", "[fsdp]\nenabled = true\nactivation_checkpointing = true\n")
    assert all(state.visible(k) for k in MERGED)


async def test_quick_start_7b_on_8x80gb_lands_on_review_and_saves_a_compiling_file(tmp_path, _wizard_env):
    """The issue's target: 7B Llama-style, 8×80 GB, sharded checkpoints, bf16."""
    model = _wizard_env / "llama-2-7b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA2_7B))
    path = _wizard_env / "settings.toml"
    app = make_app(path, tmp_path=tmp_path)
    from tuner.tui.services import propose
    app.services.proposal = propose  # the real estimator (the fixture fakes only the table)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f10")
        await pilot.pause()
        await pilot.press(*"llama-2-7b", "tab", "8", "tab", "8", "0", "tab", "1")
        await pilot.pause()
        proposal = str(app.screen.query_one("#qs-proposal").render())
        assert "Proposed: ZeRO-1" in proposal and "GiB per GPU of 80" in proposal, proposal
        await pilot.press("enter")
        await pilot.pause()
        assert app.state.step == len(STEPS) - 1  # Review
        await pilot.press("ctrl+s")
        await pilot.pause()
    result = compile_file(path)
    assert result.ok, [d.format() for d in result.diagnostics.items]
    s = result.settings
    assert result.plan.strategy == "zero1" and result.plan.world_size == 8
    assert s.training.mixed_precision == "bf16" and s.checkpoint.state_dict_type == "sharded"
    assert s.hardware.gpu_memory_gib == 80


def test_every_key_declares_its_wizard_step():
    """The step (and main-field order) of each key is declared with it (compiler/keys/sections/):
    a real step, and no two main fields of a step in the same place."""
    from tuner.tui.layout import STEP_IDS

    seen: dict[tuple[str, int], str] = {}
    for path, info in index().keys.items():
        assert info.step in STEP_IDS[:-1], f"{path}: step {info.step!r} is not a wizard step"
        if info.setting.order is not None:
            place = (info.step, info.setting.order)
            assert place not in seen, f"{path} and {seen[place]} both declare {place}"
            seen[place] = path
