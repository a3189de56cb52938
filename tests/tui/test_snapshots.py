"""How each step looks, at 80x24 (the smallest supported terminal) and 120x40.

Each snapshot opens the wizard on a new settings file with fixed hardware facts (two
H100s) and presses the step's function key, as a person would.
"""

from __future__ import annotations

import pytest

from tuner.tui.layout import STEPS

from .conftest import FAKE_BLOCKS, fake_services, make_app, unavailable_services

pytestmark = pytest.mark.tui

SIZES = [(80, 24), (120, 40)]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("number,step", [(i + 1, s.id) for i, s in enumerate(STEPS)], ids=[s.id for s in STEPS])
def test_step(snap_compare, _wizard_env, tmp_path, number, step, size):
    """The person presses F1..F6 to open a step of a new settings file."""
    app = make_app(_wizard_env / "settings.toml", tmp_path=tmp_path)
    assert snap_compare(app, press=[f"f{number}"], terminal_size=size)


def test_deepspeed_builder(snap_compare, _wizard_env, tmp_path):
    """On the Sharding step the person opens the DeepSpeed builder (F7)."""
    app = make_app(_wizard_env / "settings.toml", tmp_path=tmp_path)
    assert snap_compare(app, press=["f3", "f7"], terminal_size=(120, 40))


def test_block_detection(snap_compare, _wizard_env, tmp_path):
    """The person opens block detection (F8) beside the wrap-classes field."""
    app = make_app(_wizard_env / "settings.toml", services=fake_services(tmp_path, FAKE_BLOCKS), tmp_path=tmp_path)

    async def settle(pilot):
        await pilot.press("f3", "f8")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    assert snap_compare(app, run_before=settle, terminal_size=(80, 24))


def test_block_detection_unavailable(snap_compare, _wizard_env, tmp_path):
    """Without the detection service the modal says so instead of showing classes."""
    app = make_app(_wizard_env / "settings.toml", services=unavailable_services(tmp_path), tmp_path=tmp_path)

    async def settle(pilot):
        await pilot.press("f3", "f8")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    assert snap_compare(app, run_before=settle, terminal_size=(80, 24))


def test_maintenance(snap_compare, _wizard_env, tmp_path):
    """The person opens the settings screen (F9) for cache maintenance."""
    app = make_app(_wizard_env / "settings.toml", tmp_path=tmp_path)
    assert snap_compare(app, press=["f9"], terminal_size=(80, 24))


def test_quick_start(snap_compare, _wizard_env, tmp_path):
    """A new user presses F10 on the first screen: four answers and the proposed strategy."""
    app = make_app(_wizard_env / "settings.toml", tmp_path=tmp_path)
    assert snap_compare(app, press=["f10"], terminal_size=(80, 24))


def test_help(snap_compare, _wizard_env, tmp_path):
    """The person presses ? for every key and the searchable settings reference."""
    app = make_app(_wizard_env / "settings.toml", tmp_path=tmp_path)
    assert snap_compare(app, press=["question_mark", *"seed"], terminal_size=(80, 24))


def test_too_small(snap_compare, _wizard_env, tmp_path):
    """A terminal below 60x16 says so instead of drawing (and crashing) the form."""
    app = make_app(_wizard_env / "settings.toml", tmp_path=tmp_path)
    assert snap_compare(app, terminal_size=(30, 8))
