"""Values DeepSpeed's own config models refuse are refused by `tuner compile`, with the key path.

tuner checks them without importing DeepSpeed, from `schemas/deepspeed_rules.json`; these
tests re-derive that file from the installed DeepSpeed and cross-check every case against
the real `DeepSpeedConfig`, so tuner's rules cannot drift from DeepSpeed's.
"""

from __future__ import annotations

import importlib.util
import json
from importlib import resources
from pathlib import Path

import pytest
from tuner.compiler.compile import compile_text

from tests import harness
from tests.compiler.helpers import parse_deepspeed

#: The generator is a script (it imports DeepSpeed, so it lives outside the packages).
_SPEC = importlib.util.spec_from_file_location(
    "deepspeed_rules_gen", Path(__file__).resolve().parents[2] / "scripts" / "deepspeed_rules_gen.py")
assert _SPEC is not None and _SPEC.loader is not None
_GEN = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_GEN)
derive_rules, render_rules = _GEN.derive_rules, _GEN.render_rules


def test_rules_file_is_what_the_installed_deepspeed_says():
    committed = resources.files("tuner.schemas").joinpath("deepspeed_rules.json").read_text()
    assert committed == render_rules(derive_rules()), (
        "schemas/deepspeed_rules.json is stale: regenerate it with "
        "`python scripts/deepspeed_rules_gen.py schemas/deepspeed_rules.json`")


def _settings(config: dict) -> str:
    return "[deepspeed]\nenabled = true\n[deepspeed.config]\n" + "\n".join(
        f"{key} = {json.dumps(value)}" for key, value in config.items() if not isinstance(value, dict)) + "".join(
        f"\n[deepspeed.config.{key}]\n" + "\n".join(f"{k} = {_toml(v)}" for k, v in value.items())
        for key, value in config.items() if isinstance(value, dict))


def _toml(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def _deepspeed_refuses(config: dict) -> bool:
    try:
        parse_deepspeed({"train_micro_batch_size_per_gpu": 1, **config}, 1)
    except Exception:
        return True
    return False


BAD = [
    ({"zero_optimization": {"stage": 2, "reduce_bucket_size": 0}}, "deepspeed.config.zero_optimization.reduce_bucket_size"),
    ({"amp": {"enabled": True}}, "deepspeed.config.amp"),
    ({"zero_optimization": {"stage": 3, "mics_shard_size": 2}}, "deepspeed.config.zero_optimization.mics_shard_size"),
    ({"zero_optimization": {"stage": 2, "offload_optimizer": "cpu"}}, "deepspeed.config.zero_optimization.offload_optimizer"),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "buffer_count": -1}}},
     "deepspeed.config.zero_optimization.offload_param.buffer_count"),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "disk"}}},
     "deepspeed.config.zero_optimization.offload_param.device"),
    ({"zero_optimization": {"stage": 2, "overlap_comm": "sometimes"}}, "deepspeed.config.zero_optimization.overlap_comm"),
    ({"zero_optimization": {"stage": 2, "contiguous_gradient": True}}, "deepspeed.config.zero_optimization.contiguous_gradient"),
    ({"zero_optimization": {"stage": 5}}, "deepspeed.config.zero_optimization.stage"),
    ({"bf16": {"enabled": True, "loss_scale": 0}}, "deepspeed.config.bf16.loss_scale"),
    ({"fp16": {"enabled": True, "initial_scale_power": 1.5}}, "deepspeed.config.fp16.initial_scale_power"),
    ({"zero_optimization": {"stage": 2, "sub_group_size": [1]}}, "deepspeed.config.zero_optimization.sub_group_size"),
]


@pytest.mark.parametrize("config,key", BAD, ids=[k.removeprefix("deepspeed.config.") for _, k in BAD])
def test_bad_value_is_refused_with_its_key_path_as_deepspeed_does(config, key):
    result = compile_text(_settings(config))
    assert not result.ok
    assert key in [d.key for d in result.diagnostics.errors], [d.format() for d in result.diagnostics.errors]
    assert _deepspeed_refuses(config), "DeepSpeed itself accepts this: tuner's rule is stricter than DeepSpeed"


# What pydantic's lax mode lets through, DeepSpeed accepts; so must tuner.
GOOD = [
    {"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8, "overlap_comm": "true"}},
    {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 1000, "offload_param": {"device": "cpu"}}},
    {"zero_optimization": {"stage": 3, "prefetch_bucket_size": 1000, "offload_param": {"device": "none"}}},
    {"bf16": {"enabled": True, "immediate_grad_update": 1}},
    {"fp16": {"enabled": False, "loss_scale": 128}},
]


@pytest.mark.parametrize("config", GOOD)
def test_values_deepspeed_accepts_are_accepted(config):
    result = compile_text("platform = 'cuda'\n" + _settings(config))
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    assert not _deepspeed_refuses(config)


def test_estimate_does_not_crash_on_a_wrong_nested_type(tmp_path):
    settings = tmp_path / "settings.toml"
    settings.write_text(_settings({"zero_optimization": {"stage": 2, "offload_optimizer": "cpu"}}))
    for command in (["compile"], ["estimate"]):
        r = harness.tuner(*command, str(settings))
        assert r.returncode == 1, r.stderr
        assert "Traceback" not in r.stderr
        assert "zero_optimization.offload_optimizer" in r.stderr
