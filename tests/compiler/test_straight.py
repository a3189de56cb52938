"""The compile is a straight line: gather (every read, and the one normalise) -> rules (pure:
diagnostics, the resolved settings and the plan, made once and frozen) -> model facts ->
emit; no stage calls back into an earlier one, and nothing on the compile path reads a file
or probes the platform when an argument is left out.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from tuner.compiler.canonical.normalise import normalise
from tuner.compiler.compile import compile_inputs, compile_source, compile_text
from tuner.compiler.diagnostics import Diagnostics
from tuner.compiler.gather import gather
from tuner.compiler.keys.settings import Settings
from tuner.compiler.plan import deepspeed_config
from tuner.compiler.plan.rules import check
from tuner.compiler.read.hardware import FACTS_ENV, HardwareFacts
from tuner.compiler.read.platform_probe import detect_platform
from tuner.compiler.read.source import read_settings

from tests.compiler.stage_trace import ORDER, trace

CPU = HardwareFacts(platform="cpu", source="stated")


def ds_project(tmp_path):
    """Settings whose raw DeepSpeed config sets what the plan follows: the ZeRO stage, the
    batch factors (via train_batch_size) and the precision."""
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}, "train_batch_size": 24,
                                                  "train_micro_batch_size_per_gpu": 3, "bf16": {"enabled": True}}))
    (tmp_path / "base.yaml").write_text("compute_environment: LOCAL_MACHINE\ndebug: false\n")
    path = tmp_path / "settings.toml"
    path.write_text('[model]\npath = "builtin:tiny-llama"\n[hardware]\nnum_processes = 4\n'
                    '[accelerate]\nbase = "base.yaml"\n[deepspeed]\nconfig = "ds.json"\n')
    return path


def test_a_compile_enters_each_stage_once_top_down(tmp_path):
    src = read_settings(ds_project(tmp_path))
    result, t = trace(lambda: compile_source(src, facts=CPU))
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    # the raw config's stage and batch reached the plan, which was made once (no patching)
    assert (result.plan.strategy, result.plan.global_batch_size) == ("zero3", 24)
    assert result.settings.training.gradient_accumulation_steps == 2
    # The only call into an earlier stage: normalise asks gather's reader for the DeepSpeed
    # config it names (inside gather, which runs the normalise stage once).
    up = [(a, b, f) for a, b, f in t.entries if a in ORDER and ORDER.index(b) < ORDER.index(a)]
    assert up == [("normalise", "gather", "gather.gather.<locals>.read")], t.entries
    straight = [(a, b, f) for a, b, f in t.entries if (a, b, f) not in up]
    assert [b for i, (_, b, _) in enumerate(straight) if i == 0 or straight[i - 1][1] != b] == ORDER, straight
    assert t.calls["normalise.normalise"] == 1 and t.calls["rules.check"] == 1 and t.calls["rules._plan"] == 1
    assert t.calls["deepspeed_config.build"] == 1 and t.calls["model_facts.check"] == 1


def test_rules_return_a_frozen_plan_and_settings_and_change_nothing(tmp_path):
    inputs = gather(read_settings(ds_project(tmp_path)), facts=CPU)
    n = inputs.normalised
    before = json.dumps(n.settings, default=dict, sort_keys=True)
    checked = check(n, Diagnostics(), "cpu", inputs.model("builtin:tiny-llama", "causal_lm", ""))
    assert json.dumps(n.settings, default=dict, sort_keys=True) == before
    assert n.settings["hardware"]["platform"] == "auto" and checked.settings.hardware.platform == "cpu"
    assert checked.plan.strategy == "zero3" and checked.settings.deepspeed.zero_stage == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        checked.plan.strategy = "zero2"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        checked.settings.training.micro_batch_size = 8  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        checked.settings.training = checked.settings.training  # type: ignore[misc]
    with pytest.raises(TypeError):
        n.settings["fsdp"]["version"] = 1  # type: ignore[index]
    # frozen values still compare with plain ones and make new values
    thawed = Settings.from_dict(checked.settings.to_dict())
    assert thawed == checked.settings and checked.settings == thawed
    assert dataclasses.replace(checked.settings.training, micro_batch_size=8).micro_batch_size == 8
    # one inputs value compiles the same twice: no stage changed what it was given
    first, again = compile_inputs(inputs), compile_inputs(inputs)
    assert first.files == again.files and first.diagnostics.items == again.diagnostics.items


def test_the_deepspeed_build_returns_new_settings_and_leaves_its_input(tmp_path):
    s = Settings.from_dict({"deepspeed": {"enabled": True, "config": {
        "zero_optimization": {"stage": 3}, "train_batch_size": 16, "train_micro_batch_size_per_gpu": 2}}})
    before = s.to_dict()
    _, adopted = deepspeed_config.build(s, 4, frozenset(), Diagnostics())
    assert s.to_dict() == before
    assert (adopted.deepspeed.zero_stage, adopted.training.micro_batch_size,
            adopted.training.gradient_accumulation_steps) == (3, 2, 2)


def test_no_compile_path_function_reads_when_an_argument_is_left_out(tmp_path, monkeypatch):
    # normalise: a DeepSpeed config named by path comes from the gather stage's reader only
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 3}}')
    diags = Diagnostics()
    n = normalise({"deepspeed": {"config": "ds.json"}}, diags)
    assert n.settings["deepspeed"]["config"] == {}
    assert [d.message for d in diags.errors] == ["DeepSpeed config file ds.json was not read before normalising"]
    # the platform probe reads no facts file: the caller passes the facts it read
    facts = tmp_path / "facts.json"
    facts.write_text(HardwareFacts(platform="rocm", source="stated").to_json())
    monkeypatch.setenv(FACTS_ENV, str(facts))
    monkeypatch.delenv("TUNER_PLATFORM", raising=False)
    assert detect_platform(HardwareFacts(platform="rocm")) == "rocm"
    assert detect_platform(None) != "rocm"
    # rules need the detected platform; the model's size needs its gathered facts
    with pytest.raises(TypeError):
        check(n, Diagnostics())  # type: ignore[call-arg]
    from tuner.compiler.memory.model import model_size
    from tuner.compiler.review.model_facts import nvme_bytes

    result = compile_text('[model]\npath = "builtin:tiny-llama"\n', facts=CPU)
    with pytest.raises(TypeError):
        model_size(result.settings)  # type: ignore[call-arg]
    p = result.plan
    with pytest.raises(TypeError):
        nvme_bytes(result.settings, p.strategy, p.world_size, p.processes_per_machine, p.platform)  # type: ignore[call-arg]
