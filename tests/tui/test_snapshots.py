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


#: Issue 37 item 6: 8 x 80 GiB GPUs, the table for a built-in model (its source line is the
#: same on every machine, unlike a model folder's path).
TABLE_SETTINGS = ('[model]\npath = "builtin:small-llama"\n[hardware]\nplatform = "cuda"\nnum_processes = 8\n'
                  'gpu_memory_gib = 80\n[training]\nmixed_precision = "bf16"\n')


def _with_the_real_estimate(tmp_path):
    from tuner.tui.services import estimate_table

    services = fake_services(tmp_path)
    services.estimate = estimate_table
    return services


async def _show_the_table(pilot):
    await pilot.press("f6")
    await pilot.pause()
    box = pilot.app.query_one("#estimate-box")
    pilot.app.query_one("#step-review").scroll_to_widget(box, animate=False, top=True)
    await pilot.pause()


def test_memory_table_80x24(snap_compare, _wizard_env, tmp_path):
    """The Review step's memory table at 80x24, scrolled into view: no row wraps."""
    app = make_app(_wizard_env / "settings.toml", TABLE_SETTINGS, services=_with_the_real_estimate(tmp_path),
                   tmp_path=tmp_path)
    assert snap_compare(app, run_before=_show_the_table, terminal_size=(80, 24))


async def test_the_memory_table_of_a_7b_model_is_not_wrapped_at_80x24(_wizard_env, tmp_path):
    """Every line of the table (rows, the model's path, the notes) within the width the
    Review step has at 80x24: the widget is exactly as tall as the table's lines."""
    import json

    from .test_wizard_behaviours import LLAMA2_7B

    (_wizard_env / "llama-2-7b").mkdir()
    (_wizard_env / "llama-2-7b" / "config.json").write_text(json.dumps(LLAMA2_7B))
    text = TABLE_SETTINGS.replace("builtin:small-llama", "llama-2-7b")
    app = make_app(_wizard_env / "settings.toml", text, services=_with_the_real_estimate(tmp_path), tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _show_the_table(pilot)
        table = app.query_one("#estimate")
        lines = str(table.render()).splitlines()
        assert "LlamaForCausalLM" in str(table.render()) or "6.74B" in str(table.render())
        assert table.size.height == len(lines), f"{len(lines)} lines drawn in {table.size.height} rows"
        assert max(len(line) for line in lines) <= app.query_one("#estimate-box").size.width
