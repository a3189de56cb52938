"""Configs the upstream tools accept mean the same after tuner (issue 23), judged by accelerate's
and DeepSpeed's own code (tests/compiler/interop.py, docs/interop.md).

One test per slip: nested "auto" DeepSpeed drops (item 2), FSDP with no fsdp_config (3),
minimal DeepSpeed YAMLs (4), a multi-process YAML without num_processes (6), a refusal that is
complete (9). Item 1 is tests/compiler/test_offload_plain_script.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tuner.compiler.compile import compile_text
from tuner.compiler.formats.importer import ImportRefused, import_files, to_toml

from tests import harness
from tests.compiler.helpers import parse_deepspeed
from tests.compiler.interop import import_and_compile, launch_view
from tests.compiler.test_peer_configs import equivalence_problems


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("ACCELERATE_LOG_LEVEL", "error")
    monkeypatch.setenv("TUNER_PLATFORM", "cpu")  # the source's target must win over the host's


def _round_trip(source, tmp_path, monkeypatch) -> list[str]:
    """import -> compile -> the launch accelerate derives from each, compared."""
    import_and_compile(source, tmp_path)
    monkeypatch.chdir(source.parent)
    theirs = launch_view(source)
    monkeypatch.chdir(tmp_path)
    return equivalence_problems(theirs, launch_view(tmp_path / "build" / "accelerate.yaml"))


def test_fsdp_without_fsdp_config_imports_as_accelerates_own_defaults(tmp_path, monkeypatch):
    """accelerate builds its plugin from its defaults (FSDP v1, RAM-efficient loading, FULL
    state dict...), not tuner's FSDP2 defaults (item 3)."""
    source = tmp_path / "src" / "fsdp.yaml"
    source.parent.mkdir()
    source.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 2\n"
                      "mixed_precision: bf16\n")
    assert _round_trip(source, tmp_path, monkeypatch) == []
    assert import_files([source]).values["fsdp.version"] == 1


@pytest.mark.parametrize("deepspeed_config", [
    {"zero_stage": 3, "zero3_init_flag": True},
    {"zero_stage": 3},
    {"offload_optimizer_device": "cpu"},  # no stage: accelerate's 2
], ids=["zero3-init", "zero3-bare", "no-stage"])
def test_minimal_deepspeed_yaml_keeps_every_plugin_default(deepspeed_config, tmp_path, monkeypatch):
    """Every key accelerate's DeepSpeedPlugin defaults (zero3_init_flag on for stage 3, no 16-bit
    gather on save, stage 2) comes back at accelerate's default (item 4)."""
    source = tmp_path / "src" / "ds.yaml"
    source.parent.mkdir()
    lines = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in deepspeed_config.items())
    source.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_processes: 2\n"
                      f"deepspeed_config:\n{lines}")
    assert _round_trip(source, tmp_path, monkeypatch) == []


@pytest.mark.parametrize("dtype", ["MULTI_GPU", "FSDP", "DEEPSPEED", "MULTI_CPU"])
def test_multi_process_yaml_without_num_processes_is_refused_naming_the_key(dtype, tmp_path):
    """accelerate launch does not guess the process count for these types; tuner used to
    compile one process silently (item 6). Exit 1, nothing written, the key named."""
    source = tmp_path / "cfg.yaml"
    source.write_text(f"compute_environment: LOCAL_MACHINE\ndistributed_type: {dtype}\nmixed_precision: 'no'\n")
    with pytest.raises(ImportRefused, match="no num_processes.*add `num_processes: N`"):
        import_files([source])
    out = tmp_path / "settings.toml"
    r = harness.tuner('import', str(source), '-o', str(out))
    assert r.returncode == 1 and "num_processes" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()
    source.write_text(source.read_text() + "num_processes: 4\n")
    assert import_files([source]).values["hardware.num_processes"] == 4


def _compile_ds(config: dict, **deepspeed) -> object:
    import tomlkit

    settings = {"hardware": {"platform": "cpu", "num_processes": 1}, "checkpoint": {"export": False},
                "deepspeed": {"enabled": True, **deepspeed, "config": config}}
    return compile_text(tomlkit.dumps(settings))


def test_nested_auto_deepspeed_drops_is_accepted_with_a_note_naming_its_default():
    """DeepSpeed's config models drop an "auto" nothing fills and apply their default: tuner
    accepts it and says which default (item 2); DeepSpeed parses the compiled JSON."""
    config = {"train_micro_batch_size_per_gpu": 1,
              "zero_optimization": {"stage": 3, "sub_group_size": "auto", "offload_param": {"device": "cpu",
                                                                                           "buffer_count": "auto"}}}
    result = _compile_ds(config)
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    notes = {d.key: d.message for d in result.diagnostics.items if d.severity == "note"}
    assert "1000000000" in notes["deepspeed.config.zero_optimization.sub_group_size"]
    assert "DeepSpeed drops it" in notes["deepspeed.config.zero_optimization.offload_param.buffer_count"]
    parsed = parse_deepspeed(json.loads(result.deepspeed_json), 1)
    assert parsed.zero_config.sub_group_size == 1_000_000_000


@pytest.mark.parametrize("zero", [
    {"stage3_gather_fp16_weights_on_model_save": True, "stage3_gather_16bit_weights_on_model_save": True},
    {"cpu_offload": True, "offload_optimizer": {"device": "cpu"}},
    {"prefetch_bucket_size": 1000, "stage3_prefetch_bucket_size": 1000},
], ids=["gather-fp16-and-16bit", "cpu_offload-and-offload_optimizer", "alias-and-name"])
def test_a_refusal_names_every_key_so_the_fixed_file_is_one_deepspeed_accepts(zero, tmp_path):
    """Two spellings of one DeepSpeed setting (DeepSpeed refuses them together) are refused
    with both keys named; keeping either one compiles to a JSON DeepSpeed accepts, and tuner
    adds no second spelling of its own (item 9)."""
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, **zero}}
    with pytest.raises((AssertionError, ValueError)):  # pydantic's ValidationError is a ValueError
        parse_deepspeed(config, 1)  # DeepSpeed's own verdict on the source
    refused = _compile_ds(config)
    (err,) = refused.diagnostics.errors
    first, second = zero
    assert first in err.message and second in err.message
    for keep in zero:
        fixed = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, keep: zero[keep]}}
        # settings that ask tuner for the same choice must not add the other spelling
        result = _compile_ds(fixed, **({"gather_16bit_weights_on_model_save": True} if "gather" in keep else {}))
        assert result.ok, [d.format() for d in result.diagnostics.errors]
        parse_deepspeed(json.loads(result.deepspeed_json), 1)


def test_deepspeed_sequence_parallel_size_counts_in_the_world_size(tmp_path):
    """DeepSpeed checks the batch against world / sequence_parallel_size data-parallel ranks
    (Ulysses): the import infers the world with it, and the compile checks the same way, so the
    JSON DeepSpeed accepts for the source is the one tuner writes (item 5)."""
    config = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
              "sequence_parallel_size": 2, "zero_optimization": {"stage": 2}}
    parse_deepspeed(config, 8 // 2)  # DeepSpeed accepts the source at 8 processes (4 data-parallel ranks)
    source = tmp_path / "ds.json"
    source.write_text(json.dumps(config))
    imported = import_files([source])
    assert imported.values["hardware.num_processes"] == 8
    result = compile_text(to_toml(imported), path=tmp_path / "settings.toml")
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    assert result.plan.data_parallel_size == 4
    parse_deepspeed(json.loads(result.deepspeed_json), result.plan.data_parallel_size)
    three = compile_text(to_toml(imported), ["num_processes=3"], path=tmp_path / "settings.toml")
    assert any(d.key == "deepspeed.config.sequence_parallel_size" for d in three.diagnostics.errors)


def test_simpletuner_vocabulary_is_kept_exactly(tmp_path):
    """SimpleTuner's names (item 8): torch-adamw is AdamW, adam_weight_decay survives exactly
    (it used to become 0), warmup ratio, clipping method and base-model precision have keys,
    Prodigy is kept as the training optimizer, and what has no key is named (lycoris_config in
    its own note, ramtorch in the list of keys not imported), never refusing the whole file."""
    source = tmp_path / "config.json"
    base = {"--model_family": "flux", "--pretrained_model_name_or_path": "black-forest-labs/FLUX.1-dev",
            "--adam_weight_decay": 0.01, "--warmup_ratio": 0.05, "--grad_clip_method": "norm",
            "--max_grad_norm": 1.5, "--base_model_precision": "int8-quanto", "--lycoris_config": "lycoris.json",
            "--ramtorch": True}
    source.write_text(json.dumps({**base, "--optimizer": "torch-adamw"}))
    imported = import_files([source])
    text = to_toml(imported)
    result = compile_text(text)
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    t = result.settings.training
    assert (t.optimizer, t.weight_decay, t.warmup_ratio, t.clip_method, t.max_grad_norm) == ("adamw", 0.01, 0.05,
                                                                                             "norm", 1.5)
    assert result.settings.model.base_precision == "int8-quanto"
    assert "ramtorch" in imported.not_distributed["config.json"]  # memory placement: the catch-all list
    # lycoris_config changes what SimpleTuner trains (with lora_type lycoris): its own note (issue 34)
    assert "lycoris_config" not in imported.not_distributed["config.json"]
    assert any(r.startswith("config.json: lycoris_config = 'lycoris.json'") for r in imported.remarks)
    source.write_text(json.dumps({**base, "--optimizer": "prodigy"}))
    assert compile_text(to_toml(import_files([source]))).settings.training.optimizer == "prodigy"
    # unset clipping is SimpleTuner's default: each value, at 2.0
    source.write_text(json.dumps({"--model_family": "flux", "--optimizer": "adamw_bf16"}))
    t = compile_text(to_toml(import_files([source]))).settings.training
    assert (t.clip_method, t.max_grad_norm) == ("value", 2.0)


def test_tuner_run_refuses_an_optimizer_whose_package_is_missing(tmp_path):
    """Lion/Prodigy train when their package is installed; otherwise tuner run says which
    package, before any rank starts (exit 1, no traceback)."""
    from tuner.runtime.optim import missing_optimizer_package

    if missing_optimizer_package("prodigy") is None:
        pytest.skip("prodigyopt is installed here")
    settings = tmp_path / "settings.toml"
    settings.write_text("[hardware]\nplatform = 'cpu'\n[training]\noptimizer = 'prodigy'\nmax_steps = 1\n"
                        f"[output]\ndir = '{tmp_path / 'out'}'\n")
    r = harness.tuner('run', str(settings), timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "pip install prodigyopt" in r.stderr and "Traceback" not in r.stderr


ULYSSES = """
[model]
family = "causal_lm"
path = "builtin:tiny-llama"
[hardware]
platform = "cuda"
num_processes = 4
[deepspeed]
enabled = true
zero_stage = 3
[context_parallel]
sp_size = 2
sp_attn_implementation = "flash_attention_2"
[training]
mixed_precision = "bf16"
micro_batch_size = 2
[data]
seq_len = 4096
"""


def test_ulysses_sequence_parallelism_is_a_setting_beside_ring_cp(tmp_path, monkeypatch):
    """accelerate's parallelism_config_sp_* keys (item 5): settings, import, emit, rules and
    estimate know them; the launch accelerate derives has sp_size 2 on a 2-way data-parallel
    mesh, and the seed's CP rule is intact."""
    settings = tmp_path / "settings.toml"
    settings.write_text(ULYSSES)
    result = compile_text(ULYSSES, path=settings)
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    assert result.plan.data_parallel_size == 2
    pc = yaml.safe_load(result.accelerate_yaml)["parallelism_config"]
    assert pc["parallelism_config_sp_size"] == 2 and pc["parallelism_config_dp_shard_size"] == 2
    assert pc["parallelism_config_sp_attn_implementation"] == "flash_attention_2"
    result.write()
    monkeypatch.chdir(tmp_path)
    view = launch_view(tmp_path / "build" / "accelerate.yaml")
    assert view["parallelism"]["sp_size"] == 2 and view["parallelism"]["sp_backend"] == "deepspeed"
    # the sequence split lowers the activations the estimate counts per rank
    one = compile_text(ULYSSES.replace("sp_size = 2", "sp_size = 1"), path=settings)
    acts = [r.estimate.chosen.device.activations for r in (result, one)]
    assert acts[0] < acts[1]
    without_ds = compile_text(ULYSSES.replace("enabled = true", "enabled = false"), path=settings)
    assert any(d.key == "context_parallel.sp_size" and "DeepSpeed" in d.message for d in without_ds.diagnostics.errors)
    both = compile_text(ULYSSES.replace("sp_size = 2", "sp_size = 2\nsize = 2"), path=settings)
    assert any("either context parallelism" in d.message for d in both.diagnostics.errors)
    # the import of trl's ALST config lands in the same keys
    alst = Path(__file__).parent / "data" / "trl" / "alst_ulysses_4gpu.yaml"
    values = import_files([alst]).values
    assert values["context_parallel.sp_size"] == 2 and values["context_parallel.sp_backend"] == "deepspeed"


def test_warmup_ratio_reaches_the_schedule():
    """tuner run's schedule warms up for warmup_ratio x the steps when warmup_steps is 0."""
    from types import SimpleNamespace

    import torch
    from tuner.runtime.optim import optimizer_and_scheduler

    param = torch.nn.Parameter(torch.zeros(3))
    t = SimpleNamespace(learning_rate=1.0, weight_decay=0.0, optimizer="adamw", lr_scheduler="linear",
                        warmup_steps=0, warmup_ratio=0.5)
    opt, sched = optimizer_and_scheduler([param], t, {}, 10, 1)
    lrs = []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == 0.0 and lrs[5] == 1.0  # 5 warmup steps of 10
