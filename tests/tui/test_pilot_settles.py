"""The tests' pilot reads the screen only after the wizard has settled, even when Textual's
own wait returns at once (as `wait_for_idle` does on a loaded machine where the process was
simply not scheduled for 20 ms).

Without the settling pilot (tests/tui/conftest.py `_pilot_waits_until_settled`) these two
fail under the same condition, and so did six tests of the TUI suite (CI saw one of them:
the LoRA row still hidden after choosing LoRA)."""

from __future__ import annotations

import asyncio

import pytest
import textual.pilot

from .conftest import choose, make_app, widget


@pytest.fixture(autouse=True)
def _looks_idle_at_once(monkeypatch):
    async def at_once(*_args, **_kwargs) -> None:
        await asyncio.sleep(0)

    monkeypatch.setattr(textual.pilot, "wait_for_idle", at_once)


async def test_a_choice_shows_the_rows_it_opens_before_the_test_reads_them(tmp_path, _wizard_env):
    app = make_app(_wizard_env / "settings.toml", tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        row = app.screen.query_one("#row-model--lora_rank")
        assert not row.display
        await choose(pilot, "model.type", "lora")
        assert row.display and row.built
        assert widget(app, "model.lora_rank").value == str(app.state.value("model.lora_rank"))


async def test_a_strategy_choice_hides_the_other_strategys_rows_before_the_test_reads_them(tmp_path, _wizard_env):
    app = make_app(_wizard_env / "settings.toml", tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f3")  # the sharding step
        await choose(pilot, "in-strategy", "fsdp2")
        assert widget(app, "fsdp.reshard_after_forward").parent.parent.display
        await choose(pilot, "in-strategy", "ddp")
        assert app.state.strategy == "ddp"
        assert not widget(app, "fsdp.reshard_after_forward").parent.parent.display
