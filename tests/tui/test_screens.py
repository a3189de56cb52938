"""Block detection, DeepSpeed templates, maintenance, quitting, NO_COLOR, start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from tuner.compiler.read.block_cache import ClassStat, DetectionResult
from tuner.tui.blocks import parse_detection
from tuner.tui.services import ServiceUnavailable

from .conftest import FAKE_BLOCKS, Calls, fake_services, make_app, type_into, unavailable_services, widget

pytestmark = pytest.mark.tui


async def test_block_detection_select_apply_and_refresh(tmp_path, _wizard_env):
    calls = Calls()
    app = make_app(_wizard_env / "settings.toml", services=fake_services(tmp_path, calls=calls), tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f3", "f8")
        await app.workers.wait_for_complete()
        await pilot.pause()
        modal = app.screen
        assert "(cached; F5 refreshes)" in str(modal.query_one("#blocks-status").render())
        assert "LlamaDecoderLayer" in str(modal.query_one("#blocks-badges").render())
        table = modal.query_one("#blocks-table")
        assert table.row_count == 3
        await pilot.press("down", "space")  # also select LlamaAttention (row 2)
        await pilot.press("f5")  # Refresh Detection: bypasses the cache
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert calls.log[-1] == ("detect", ("builtin:tiny-llama", "causal_lm", "", True))
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert app.state.value("fsdp.transformer_layer_cls_to_wrap") == ["LlamaDecoderLayer", "LlamaAttention"]
        assert widget(app, "fsdp.transformer_layer_cls_to_wrap").value == "LlamaDecoderLayer, LlamaAttention"


async def test_block_detection_unavailable_says_so(tmp_path, _wizard_env):
    app = make_app(_wizard_env / "settings.toml", services=unavailable_services(tmp_path), tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f3", "f8")
        await app.workers.wait_for_complete()
        await pilot.pause()
        status = str(app.screen.query_one("#blocks-status").render())
        assert "unavailable" in status and "tuner.runtime.blocks" in status
        assert app.screen.query_one("#blocks-table").row_count == 0
        await pilot.press("ctrl+o")  # nothing to apply: the field stays as it was
        await pilot.press("escape")
        await pilot.pause()
        assert app.state.value("fsdp.transformer_layer_cls_to_wrap") == []


def test_parse_detection_reads_block_detections_own_result():
    result = DetectionResult(
        model="builtin:tiny-llama", family="causal_lm", flavour="", library="transformers",
        model_class="LlamaForCausalLM", total_parameters=30,
        classes=[ClassStat(name="Block", module="m", parameters=20, occurrences=2, per_instance=10,
                           sample_paths=["layers.0"])],
        no_split_modules=["Block"], suggested=["Block"], cached=True)
    classes, no_split, suggestions, cached = parse_detection(result.to_dict())
    assert classes == [{"name": "Block", "params": 20, "occurrences": 2, "paths": ["layers.0"]}]
    assert (no_split, suggestions, cached) == (["Block"], ["Block"], True)
    assert parse_detection(FAKE_BLOCKS)[2] == ["LlamaDecoderLayer"]


async def test_deepspeed_templates_are_saved_and_reused(tmp_path, _wizard_env):
    services = fake_services(tmp_path)
    app = make_app(_wizard_env / "settings.toml", services=services, tmp_path=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f3", "f7")
        await pilot.pause()
        app.screen.query_one("#in-deepspeed--zero_stage").value = 1
        await pilot.pause()
        await type_into(pilot, "deepspeed.gradient_clipping", "0.5")
        app.screen.query_one("#template-name").value = "zero one"
        await pilot.press("ctrl+t")
        await pilot.press("escape")  # cancel: the settings are as before the builder opened
        await pilot.pause()
        assert app.state.strategy == "fsdp2" and "[deepspeed]" not in app.state.document.text()
    saved = json.loads((services.templates.directory / "zero-one.json").read_text())
    assert saved["deepspeed.zero_stage"] == 1 and saved["deepspeed.gradient_clipping"] == 0.5

    app = make_app(_wizard_env / "other.toml", services=services, tmp_path=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f7")
        await pilot.pause()
        app.screen.query_one("#template-pick").value = "zero-one"
        await pilot.press("ctrl+l")
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert app.state.result.plan.strategy == "zero1"
        assert app.state.value("deepspeed.gradient_clipping") == 0.5


async def test_maintenance_clears_both_caches_with_toast_and_status(tmp_path, _wizard_env):
    calls = Calls()
    (_wizard_env / "swap").mkdir()
    text = '[deepspeed]\nenabled = true\nzero_stage = 3\noffload_param = "nvme"\nnvme_path = "swap"\n'
    app = make_app(_wizard_env / "settings.toml", text, services=fake_services(tmp_path, calls=calls), tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f9", "f5")
        await pilot.pause()
        status = app.screen.query_one("#maintenance-status")
        assert "Detection cache cleared: 3 entries removed" in str(status.render())
        await pilot.press("f6")
        await pilot.pause()
        assert "Offload cache" in str(status.render()) and "cleared" in str(status.render())
        assert [n.message for n in app._notifications][-2:] == [
            "Detection cache cleared: 3 entries removed", str(status.render())]
    assert calls.log == [("clear_detection", None), ("clear_offload", str(_wizard_env / "swap"))]


async def test_maintenance_without_the_services_says_unavailable(tmp_path, _wizard_env):
    def missing():
        raise ServiceUnavailable("The block-detection cache is not available (tuner.compiler.read.block_cache is missing)")

    app = make_app(_wizard_env / "settings.toml", "[hardware]\nnum_processes = 2\n",
                   services=unavailable_services(tmp_path), tmp_path=tmp_path)
    app.services.clear_detection_cache = missing
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f9", "f5")
        await pilot.pause()
        status = app.screen.query_one("#maintenance-status")
        assert "Detection cache: unavailable" in str(status.render())
        await pilot.press("f6")
        await pilot.pause()
        assert "no NVMe offload path" in str(status.render())
        await pilot.press("escape", "ctrl+q")  # an unchanged file quits at once
        await pilot.pause()
    assert app.return_value == 0


async def test_quit_with_unsaved_changes_asks_twice(tmp_path, _wizard_env):
    app = make_app(_wizard_env / "settings.toml", tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+q")  # a new file is unsaved
        await pilot.pause()
        assert app.is_running
        await pilot.press("ctrl+q")
        await pilot.pause()
    assert not (_wizard_env / "settings.toml").exists()


async def test_hardware_detection_runs_after_first_paint(tmp_path, _wizard_env):
    from tuner.tui.app import WizardApp
    from tuner.tui.model import WizardState

    state = WizardState(_wizard_env / "settings.toml")
    app = WizardApp(state, fake_services(tmp_path), cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f2")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.first_paint_at is not None
        assert "NVIDIA H100" in str(app.screen.query_one("#hw-facts").render())
        # issue 12, defect 10: a new file on bf16-capable CUDA GPUs defaults to bf16
        assert app.state.value("training.mixed_precision") == "bf16"


def test_no_color_is_respected(monkeypatch, tmp_path, _wizard_env):
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(_wizard_env / "settings.toml", tmp_path=tmp_path)
    assert app.no_color


def test_starting_the_wizard_does_not_import_torch(_wizard_env):
    """Through the real entry point, up to the first paint (and the default services)."""
    script = textwrap.dedent("""
        import asyncio, sys
        from tuner.commands.wizard import build_app
        app = build_app(None)
        seen = {}
        original = app._painted
        def painted():
            original()
            seen["torch"] = "torch" in sys.modules
            app.exit(0)
        app._painted = painted
        async def main():
            async with app.run_test(size=(80, 24)) as pilot:
                await pilot.pause()
        asyncio.run(main())
        print("TORCH", seen.get("torch"), "torch" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=_wizard_env, capture_output=True, text=True,
                         timeout=120, env={**os.environ})
    assert "TORCH False" in out.stdout, out.stdout + out.stderr


async def test_review_shows_the_real_memory_estimate(tmp_path, _wizard_env):
    from tuner.tui.services import estimate_table

    services = fake_services(tmp_path)
    services.estimate = estimate_table
    app = make_app(_wizard_env / "settings.toml", services=services, tmp_path=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f6")
        await pilot.pause()
        table = str(app.screen.query_one("#estimate").render())
        assert "> FSDP2 " in table and "per GPU" in table  # ">" marks the chosen strategy
