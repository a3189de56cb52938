"""`tuner import` as a user runs it."""

from __future__ import annotations

import json

from tuner.compiler.compile import compile_file

from tests.conftest import PEER_CONFIGS, run_tuner


def test_simpletuner_flat_json_imports_and_compiles(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "--model_type": "full", "--model_family": "sdxl", "--output_dir": "/data/x", "--fsdp_enable": True,
        "--fsdp_version": "2", "--fsdp_state_dict_type": "SHARDED_STATE_DICT", "--num_processes": 2,
        "--resolution": 64, "--validation_prompt": "a cat", "--report_to": "wandb"}))
    out = tmp_path / "settings.toml"
    proc = run_tuner("import", str(config), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "[fsdp]" in text and "version = 2" in text and 'state_dict_type = "sharded"' in text
    assert "#   --validation_prompt" not in text and "#   validation_prompt = " in text  # kept as a comment
    result = compile_file(out, overrides=["platform=cuda"])
    assert result.ok and result.plan.strategy == "fsdp2" and result.settings.model.family == "diffusion"


def test_import_refuses_to_overwrite_without_force(tmp_path):
    out = tmp_path / "settings.toml"
    out.write_text("# mine\n")
    src = PEER_CONFIGS / "accelerate/config_yaml_templates/fsdp.yaml"
    proc = run_tuner("import", str(src), "-o", str(out))
    assert proc.returncode == 2 and "already exists" in proc.stderr
    assert out.read_text() == "# mine\n"
    assert run_tuner("import", str(src), "-o", str(out), "--force", env={"TUNER_PLATFORM": "cuda"}).returncode == 0


def test_accelerate_yaml_plus_its_deepspeed_json(tmp_path):
    yaml_src = PEER_CONFIGS / "llamafactory/accelerate/ds_multi_nodes.yaml"
    json_src = PEER_CONFIGS / "llamafactory/deepspeed/ds_z3_offload_config.json"
    out = tmp_path / "settings.toml"
    proc = run_tuner("import", str(yaml_src), str(json_src), "-o", str(out))
    assert "Traceback" not in proc.stderr
    result = compile_file(out, overrides=["platform=cuda", "main_process_ip=10.0.0.1", "num_machines=2"])
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    assert result.plan.strategy == "zero3" and result.plan.world_size == 16


def test_unreadable_source_is_a_clean_error(tmp_path):
    bad = PEER_CONFIGS / "deepspeed/DeepSpeedExamples/training/imagenet/config/ds_config.json"
    proc = run_tuner("import", str(bad), "-o", str(tmp_path / "s.toml"))
    assert proc.returncode == 2 and "does not parse" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "s.toml").exists()
