"""Walk the whole wizard with the keyboard for DDP, FSDP2 and ZeRO-3 with NVMe offload,
save, and check that the saved file compiles to the expected artefacts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tuner.compiler.compile import compile_file
from tuner.tui.layout import STEP_IDS

from .conftest import choose, make_app, type_into, widget

pytestmark = pytest.mark.tui


def current(app) -> str:
    return STEP_IDS[app.state.step]


async def next_step(pilot, expect: str) -> None:
    await pilot.press("ctrl+n")
    await pilot.pause()
    assert current(pilot.app) == expect, pilot.app.state.can_advance()


def compiled(path: Path):
    result = compile_file(path)
    assert result.ok, [d.format() for d in result.diagnostics.items]
    return result


def artefacts_match(path: Path) -> None:
    """What ctrl+g wrote is byte for byte what `tuner compile` writes."""
    result = compiled(path)
    for name, text in result.files.items():
        if name == "manifest.json":
            continue  # carries the compile time and versions; its settings are checked below
        assert (path.parent / "build" / name).read_text(encoding="utf-8") == text, name
    manifest = json.loads((path.parent / "build" / "manifest.json").read_text())
    assert manifest["settings"] == json.loads(result.files["manifest.json"])["settings"]


async def test_ddp_flow(tmp_path, _wizard_env):
    path = _wizard_env / "settings.toml"
    app = make_app(path, tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        assert current(app) == "model"
        await choose(pilot, "model.family", "causal_lm")
        await choose(pilot, "model.type", "full")
        await next_step(pilot, "hardware")
        await choose(pilot, "hardware.platform", "cpu")
        await type_into(pilot, "hardware.num_processes", "2")
        await next_step(pilot, "sharding")
        await choose(pilot, "in-strategy", "ddp")
        assert not widget(app, "fsdp.reshard_after_forward").parent.parent.display  # FSDP rows hidden
        await next_step(pilot, "checkpoints")
        await type_into(pilot, "checkpoint.every_steps", "10")
        await next_step(pilot, "precision")
        await type_into(pilot, "training.micro_batch_size", "4")
        assert "Global batch: 8" in str(app.screen.query_one("#global-batch").render())
        await next_step(pilot, "review")
        await pilot.press("ctrl+s")
        await pilot.pause()
    result = compiled(path)
    assert result.plan.strategy == "ddp"
    cfg = yaml.safe_load(result.accelerate_yaml)
    assert cfg["distributed_type"] == "MULTI_CPU" and cfg["num_processes"] == 2
    assert result.settings.training.micro_batch_size == 4
    assert result.settings.checkpoint.every_steps == 10
    assert not (path.parent / "build").exists()  # plain save writes no artefacts


async def test_fsdp2_flow_save_and_compile(tmp_path, _wizard_env):
    path = _wizard_env / "settings.toml"
    app = make_app(path, tmp_path=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await next_step(pilot, "hardware")
        await pilot.press("ctrl+y")  # use the detected values: cuda, 2 GPUs
        await pilot.pause()
        assert app.state.value("hardware.platform") == "cuda"
        assert app.state.value("hardware.num_processes") == 2
        await next_step(pilot, "sharding")
        assert app.state.strategy == "fsdp2"  # the default for full-model runs
        # context parallelism is offered on CUDA targets only
        assert widget(app, "context_parallel.size").parent.parent.display
        await pilot.click("#open-blocks")
        await pilot.pause()
        await pilot.press("ctrl+o")  # apply the suggested selection
        await pilot.pause()
        assert app.state.value("fsdp.transformer_layer_cls_to_wrap") == ["LlamaDecoderLayer"]
        widget(app, "fsdp.reshard_after_forward").focus()
        await pilot.press("space")  # switch it off
        await pilot.pause()
        await next_step(pilot, "checkpoints")
        await choose(pilot, "checkpoint.state_dict_type", "full")
        await next_step(pilot, "precision")
        await choose(pilot, "training.mixed_precision", "bf16")
        await next_step(pilot, "review")
        await pilot.press("ctrl+g")
        await pilot.pause()
    result = compiled(path)
    assert result.plan.strategy == "fsdp2"
    cfg = yaml.safe_load((path.parent / "build" / "accelerate.yaml").read_text())
    fsdp = cfg["fsdp_config"]
    assert fsdp["fsdp_version"] == 2
    assert fsdp["fsdp_reshard_after_forward"] is False
    assert fsdp["fsdp_transformer_layer_cls_to_wrap"] in ("LlamaDecoderLayer", ["LlamaDecoderLayer"])
    assert cfg["mixed_precision"] == "bf16" and cfg["num_processes"] == 2
    artefacts_match(path)


async def test_zero3_nvme_flow_with_builder(tmp_path, _wizard_env):
    path = _wizard_env / "settings.toml"
    (_wizard_env / "nvme").mkdir()
    app = make_app(path, tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await next_step(pilot, "hardware")
        await choose(pilot, "hardware.platform", "cuda")
        await type_into(pilot, "hardware.num_processes", "4")
        await next_step(pilot, "sharding")
        await pilot.press("f7")  # the DeepSpeed builder (switches the strategy to DeepSpeed)
        await pilot.pause()
        assert app.state.strategy == "deepspeed"
        await choose(pilot, "deepspeed.zero_stage", 3)
        await choose(pilot, "deepspeed.offload_param", "nvme")
        await choose(pilot, "deepspeed.offload_optimizer", "cpu")
        assert any(d.key == "deepspeed.nvme_path" for d in app.state.errors)  # a path is needed
        await type_into(pilot, "deepspeed.nvme_path", "nvme")
        await type_into(pilot, "training.gradient_accumulation_steps", "2")
        preview = str(app.screen.query_one("#builder-json").render())
        assert '"stage": 3' in preview and '"nvme"' in preview
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert widget(app, "deepspeed.nvme_path").value == "nvme"  # the step shows the builder's values
        await next_step(pilot, "checkpoints")
        await next_step(pilot, "precision")
        await choose(pilot, "training.mixed_precision", "bf16")
        await type_into(pilot, "training.micro_batch_size", "2")
        await next_step(pilot, "review")
        await pilot.press("ctrl+g")
        await pilot.pause()
    result = compiled(path)
    assert result.plan.strategy == "zero3"
    ds = json.loads((path.parent / "build" / "deepspeed.json").read_text())
    zero = ds["zero_optimization"]
    assert zero["stage"] == 3
    assert zero["offload_param"]["device"] == "nvme"
    # kept as written (relative to the project, so the build travels with it)
    assert (path.parent / zero["offload_param"]["nvme_path"]).resolve() == (_wizard_env / "nvme").resolve()
    assert zero["offload_optimizer"]["device"] == "cpu"
    assert ds["train_batch_size"] == 2 * 2 * 4
    artefacts_match(path)


async def test_next_is_refused_while_the_step_has_errors(tmp_path, _wizard_env):
    app = make_app(_wizard_env / "settings.toml", tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await next_step(pilot, "hardware")
        await type_into(pilot, "hardware.num_machines", "2")  # needs machine 0's address
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert current(app) == "hardware"
        assert widget(app, "hardware.main_process_ip").parent.parent.display  # multi-node fields appear
        await type_into(pilot, "hardware.num_processes", "2")
        await type_into(pilot, "hardware.main_process_ip", "10.0.0.1")
        await next_step(pilot, "sharding")


async def test_review_lists_diagnostics_and_jumps_to_the_field(tmp_path, _wizard_env):
    app = make_app(_wizard_env / "settings.toml", tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f2")
        await type_into(pilot, "hardware.num_machines", "2")
        await pilot.press("f6")
        await pilot.pause()
        options = app.screen.query_one("#diagnostics")
        first = str(options.get_option_at_index(0).prompt)
        assert "[hardware.num_processes]" in first or "[hardware.main_process_ip]" in first
        options.focus()  # defect 12: Enter jumps at once, without moving the list first
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert current(app) == "hardware"
        assert app.focused is not None and app.focused.id in ("in-hardware--num_processes", "in-hardware--main_process_ip")
        await pilot.press("ctrl+s")  # refused: there are errors
        await pilot.pause()
        assert not (_wizard_env / "settings.toml").exists()
        await pilot.press("ctrl+r")  # a draft is saved anyway, beside the settings (defect 7)
        await pilot.pause()
    assert not (_wizard_env / "settings.toml").exists()
    assert not compile_file(_wizard_env / "settings.draft.toml").ok


async def test_the_advanced_part_is_built_when_it_first_opens(tmp_path, _wizard_env):
    """A step's Advanced part builds its rows when it first opens (not before the first paint):
    opened with Enter they show the file's values, and only the rows that apply; a jump from
    Review to one of its keys opens it and focuses the field."""
    from textual.widgets import Collapsible

    text = "[data]\nnum_workers = 3\n[training]\nseed = -1\n"
    app = make_app(_wizard_env / "settings.toml", text=text, tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        box = app.screen.query_one("#advanced-model", Collapsible)
        assert box.collapsed and not app.screen.query("#row-data--num_workers")
        assert box.title == f"Advanced ({sum(app.state.visible(k) for k in box.keys)} more settings)"
        box.query_one("CollapsibleTitle").focus()
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert not box.collapsed and widget(app, "data.num_workers").value == "3"
        await pilot.press("f6")
        await pilot.pause()
        options = app.screen.query_one("#diagnostics")
        seed = next(i for i in range(options.option_count) if "[training.seed]" in str(options.get_option_at_index(i).prompt))
        options.focus()
        options.highlighted = seed
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert current(app) == "precision" and app.focused is widget(app, "training.seed")
        assert not app.screen.query_one("#advanced-precision", Collapsible).collapsed
        assert not app.screen.query_one("#row-training--ema_decay").display  # only with training.ema on


async def test_a_rows_diagnostics_line_shows_and_goes(tmp_path, _wizard_env):
    """The line under a field (mounted when its key first has a diagnostic) shows the error
    and hides again once the value is fixed."""
    app = make_app(_wizard_env / "settings.toml", tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f5")
        await pilot.pause()
        row = app.screen.query_one("#row-training--micro_batch_size")
        assert not row.query(".field-diags")  # no diagnostic yet: no line built
        await type_into(pilot, "training.micro_batch_size", "abc")
        line = row.query_one(".field-diags")
        assert line.display and "error: must be an integer" in str(line.render())
        assert row.has_class("has-error") and line.has_class("error")
        await type_into(pilot, "training.micro_batch_size", "4")
        assert not line.display and not row.has_class("has-error")


async def test_a_field_hidden_at_start_is_built_when_it_shows(tmp_path, _wizard_env):
    """Rows the step hides (LoRA's, under a full fine-tune) get their parts when they first
    show: the value, Tab order and edits are those of any other row."""
    app = make_app(_wizard_env / "settings.toml", tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        row = app.screen.query_one("#row-model--lora_rank")
        assert not row.display and not row.built and not row.children
        await choose(pilot, "model.type", "lora")
        assert row.display and row.built
        assert widget(app, "model.lora_rank").value == str(app.state.value("model.lora_rank"))
        await pilot.press("tab")
        await pilot.pause()
        assert app.focused is widget(app, "model.lora_rank")
        await type_into(pilot, "model.lora_rank", "32")
        assert app.state.value("model.lora_rank") == 32
