"""Every bundled example compiles, and accelerate and DeepSpeed accept what it emits."""

from __future__ import annotations

import json

import pytest
from tuner.compiler.compile import compile_file

from tests.compiler.helpers import accelerate_launch_env, load_accelerate, parse_deepspeed, verify_build
from tests.conftest import EXAMPLES

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.toml"))


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.stem for p in EXAMPLE_FILES])
def test_example_compiles_and_real_parsers_accept_it(path, tmp_path, monkeypatch):
    result = compile_file(path, out_dir=tmp_path)
    assert result.ok, "\n".join(d.format() for d in result.diagnostics.errors)
    result.write()

    cfg = load_accelerate(tmp_path / "accelerate.yaml")
    assert cfg.distributed_type.value == result.plan.distributed_type
    assert cfg.num_processes == result.settings.hardware.num_processes
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["plan"]["strategy"] == result.plan.strategy
    assert set(manifest["artefacts"]) == {p.name for p in tmp_path.iterdir()} - {"manifest.json"}

    if result.plan.uses_deepspeed:
        ds = parse_deepspeed(tmp_path / "deepspeed.json", result.plan.data_parallel_size)
        assert ds.zero_optimization_stage == result.settings.deepspeed.zero_stage
        assert ds.train_batch_size == result.plan.global_batch_size
        assert cfg.deepspeed_config["deepspeed_config_file"] == str(tmp_path / "deepspeed.json")
    else:
        assert not (tmp_path / "deepspeed.json").exists()
    if cfg.num_machines == 1:
        env = accelerate_launch_env(tmp_path / "accelerate.yaml")
        if result.plan.uses_deepspeed:  # accelerate refuses, here, keys it forbids beside a config file
            for key, value in env.items():
                monkeypatch.setenv(key, value)
            from accelerate.utils import DeepSpeedPlugin

            DeepSpeedPlugin()


def test_seed_cli_example_compiles_to_what_accelerate_needs(tmp_path):
    """The FSDP2 seed's SDXL command line, as a settings file: two processes, FSDP v2,
    sharded state dict, transformer-based wrap, as accelerate's launcher sees it."""
    result = compile_file(EXAMPLES / "seed_sdxl_fsdp2.toml", out_dir=tmp_path)
    assert result.ok
    result.write()
    env = accelerate_launch_env(tmp_path / "accelerate.yaml")
    assert env["ACCELERATE_USE_FSDP"] == "true"
    assert env["FSDP_VERSION"] == "2"
    assert env["FSDP_STATE_DICT_TYPE"] == "SHARDED_STATE_DICT"
    assert env["FSDP_AUTO_WRAP_POLICY"] == "TRANSFORMER_BASED_WRAP"
    assert env["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "false"  # written as chosen, not accelerate's default
    assert load_accelerate(tmp_path / "accelerate.yaml").num_processes == 2
    assert result.settings.model.family == "diffusion" and result.settings.model.type == "full"


def test_context_parallel_example_emits_parallelism_config(tmp_path):
    result = compile_file(EXAMPLES / "fsdp2_context_parallel.toml", out_dir=tmp_path)
    assert result.ok
    result.write()
    cfg = load_accelerate(tmp_path / "accelerate.yaml")
    assert cfg.parallelism_config["parallelism_config_cp_size"] == 4
    assert cfg.parallelism_config["parallelism_config_dp_shard_size"] == 2
    env = accelerate_launch_env(tmp_path / "accelerate.yaml")
    assert env["PARALLELISM_CONFIG_CP_SIZE"] == "4"
    assert env["ACCELERATE_USE_PARALLELISM_CONFIG"] == "true"


def test_multi_node_keys_are_in_the_yaml(tmp_path):
    result = compile_file(EXAMPLES / "multi_node.toml", out_dir=tmp_path, overrides=["machine_rank=1"])
    assert result.ok
    result.write()
    cfg = load_accelerate(tmp_path / "accelerate.yaml")
    assert (cfg.num_machines, cfg.machine_rank, cfg.main_process_ip, cfg.main_process_port) == (2, 1, "10.0.0.1", 29500)
    assert cfg.rdzv_backend == "c10d"
    assert result.manifest["topology"]["processes_per_machine"] == 8


SEED_MANUAL = """
[deepspeed_config]
gradient_accumulation_steps = 4
gradient_clipping = 1.0
train_batch_size = 8
train_micro_batch_size_per_gpu = 2
[deepspeed_config.zero_optimization]
stage = 2
offload_param = { device = "cpu", pin_memory = true }
offload_optimizer = { device = "cpu", pin_memory = true }
[deepspeed_config.optimizer]
type = "AdamW"
params = { lr = 1e-4, betas = [0.9, 0.999], eps = 1e-8, weight_decay = 0.01 }
[deepspeed_config.scheduler]
type = "WarmupLR"
params = { warmup_min_lr = 0, warmup_max_lr = 1e-4, warmup_num_steps = 500 }
"""

SEED_NVME = """
[deepspeed_config.zero_optimization]
stage = 3
[deepspeed_config.zero_optimization.offload_param]
device = "nvme"
nvme_path = "{nvme}"
buffer_size = 100000000.0
pin_memory = true
"""


def test_seed_manual_deepspeed_json_compiles_and_parses(tmp_path):
    settings = tmp_path / "settings.toml"
    settings.write_text(SEED_MANUAL)
    result = compile_file(settings)
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    result.write()
    ds_json = json.loads((tmp_path / "build" / "deepspeed.json").read_text())
    ds = parse_deepspeed(ds_json, 1)
    assert (ds.train_batch_size, ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps) == (8, 2, 4)
    assert ds_json["optimizer"]["type"] == "AdamW" and ds_json["scheduler"]["params"]["warmup_num_steps"] == 500
    # DeepSpeed ignores parameter offload below stage 3; tuner says so and leaves it out.
    assert "offload_param" not in ds_json["zero_optimization"]
    assert any("offload" in d.message and d.severity == "warning" for d in result.diagnostics.items)


def test_seed_nvme_example_compiles_and_parses(tmp_path):
    nvme = tmp_path / "nvme"
    nvme.mkdir()
    settings = tmp_path / "settings.toml"
    settings.write_text(SEED_NVME.replace("{nvme}", str(nvme)) + "\n[hardware]\nplatform = \"cuda\"\n")
    result = compile_file(settings)
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    ds_json = json.loads(result.deepspeed_json)
    assert verify_build(result.write()) == []  # accelerate fills the batch "auto", DeepSpeed accepts
    param = ds_json["zero_optimization"]["offload_param"]
    assert param["device"] == "nvme" and param["nvme_path"] == str(nvme)
    assert param["buffer_size"] == 100000000 and isinstance(param["buffer_size"], int)
    assert "aio" not in ds_json  # DeepSpeed's defaults apply
