"""Issue 37 item 6: a multi-line paste from a terminal without bracketed paste arrives as
typed keys, each line break an Enter; in a one-line field the lines are joined, and the
wizard says so (with bracketed paste the first line is kept and it says that instead:
tests/tui/test_tmux_keyboard.py). The keys are offered in one burst, as one terminal read
delivers them."""

from __future__ import annotations

import pytest
from textual import events

from .conftest import make_app, widget

pytestmark = pytest.mark.tui


def _keys(text: str) -> list[events.Key]:
    return [events.Key("enter", "\r") if ch == "\r" else events.Key(ch if ch.isalnum() else "minus", ch)
            for ch in text]


async def _burst(tmp_path, text: str):
    app = make_app(tmp_path / "work" / "settings.toml", tmp_path=tmp_path)
    async with app.run_test(size=(100, 40), notifications=True) as pilot:
        field = widget(app, "output.dir")
        field.focus()
        await pilot.pause()
        field.value = ""
        for key in _keys(text):
            app.keys.offer(key)  # one read's worth of keys, queued together
        await pilot.pause()  # waits for every key to be handled (conftest's settling pilot)
        toasts = " ".join(str(t.render()) for t in app.screen.query("Toast")).replace("\n", " ")
        return field.value, toasts


async def test_a_raw_multi_line_paste_says_the_lines_were_joined(tmp_path, _wizard_env):
    value, toasts = await _burst(tmp_path, "first-line\rsecond-line")
    assert value == "first-linesecond-line"
    assert "Several lines arrived as typed text" in toasts and "joined" in toasts


async def test_typing_without_a_line_break_says_nothing(tmp_path, _wizard_env):
    value, toasts = await _burst(tmp_path, "first-line")
    assert value == "first-line" and "Several lines" not in toasts
