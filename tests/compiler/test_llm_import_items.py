"""Issue 34's single items for the LLM tools' readers, each judged by the source tool's or the
Trainer's own code (fidelity over whole files: test_llm_fidelity.py). In-process, no ranks; one
`tuner import` on the command line (the refusal's exit code and that nothing is written).

* ms-swift's built-in DeepSpeed names are its own JSON files (item 6), its 1.x files are read
  with 1.x's names and defaults;
* LLaMA-Factory's Trainer-style `fsdp:` list is FSDP as `TrainingArguments(...).fsdp_plugin_args`
  builds it (item 3);
* axolotl FSDP v1 leaving use_orig_params / sync_module_states unset imports as the Trainer's
  plugin (both true), and `reshard_after_forward` agrees with `full_shard` (item 5);
* `logging_steps` parsed as a float compiles (item 7);
* no model path: refused naming the key, nothing written (no toy model).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import yaml
from tuner.compiler.compile import compile_text
from tuner.compiler.formats import detect, swift_deepspeed
from tuner.compiler.formats.importer import ImportRefused, import_files, to_toml

from tests.compiler.fidelity_expect import trainer_fsdp_plugin
from tests.conftest import REPO, run_tuner

DATA = REPO / "tests" / "compiler" / "data"
SWIFT = DATA / "fidelity3" / "modelscope__ms-swift"
LF = DATA / "fidelity3" / "hiyouga__LLaMA-Factory" / "examples"
AXOLOTL_V1 = sorted((REPO / "tests" / "data" / "peer-configs" / "axolotl" / "fsdp_examples").glob("*q*lora*.y*ml"))


@pytest.fixture(autouse=True)
def _cpu_host(monkeypatch):
    monkeypatch.setenv("TUNER_PLATFORM", "cpu")


def _toml(paths: list[Path]) -> dict:
    return tomllib.loads(to_toml(import_files(paths)))


@pytest.mark.parametrize("name", swift_deepspeed.NAMES)
def test_ms_swift_deepspeed_names_are_its_own_json_files(name):
    """compiler/formats/swift_deepspeed.py holds the values of ms-swift's swift/config/{name}.json."""
    assert swift_deepspeed.config(name) == json.loads((SWIFT / "swift" / "config" / f"{name}.json").read_text())


def test_ms_swift_deepspeed_zero2_imports_as_ms_swifts_zero2(tmp_path):
    """`deepspeed: zero2` in ms-swift's own example is its zero2.json, not "not found" with tuner's
    ZeRO-2 defaults; compared on the imported settings (LoRA + DeepSpeed: whatever the compile says)."""
    for example in ("sft.yaml", "sft.json"):
        settings = _toml([SWIFT / "examples" / "yaml" / "deepspeed" / example])
        assert settings["deepspeed"]["enabled"] is True
        assert settings["deepspeed"]["config"] == json.loads((SWIFT / "swift" / "config" / "zero2.json").read_text())
        assert settings["model"]["type"] == "lora" and settings["model"]["lora_target_modules"] == ["all-linear"]


def test_ms_swift_versions_are_recognised_and_1x_read_with_1x_defaults(tmp_path):
    assert detect(yaml.safe_load((SWIFT / "examples" / "yaml" / "deepspeed" / "sft.yaml").read_text())) == "ms-swift"
    assert detect(yaml.safe_load((SWIFT / "examples/train/multi-node/ray/sft-3.x.yaml").read_text())) == "ms-swift"
    v1 = json.loads((SWIFT / "tests" / "llm" / "config" / "sft.json").read_text())
    assert detect(v1) == "ms-swift"
    with pytest.raises(ImportRefused, match="model_id_or_path"):  # a registry model_type, no path
        import_files([SWIFT / "tests" / "llm" / "config" / "sft.json"])
    # the same file with a path (and 1.x's sft_type spelled): swift/llm/utils/argument.py @ 32f0398b7
    source = tmp_path / "sft_args.json"
    source.write_text(json.dumps({**v1, "model_id_or_path": "qwen/Qwen-1_8B-Chat", "sft_type": "lora",
                                  "lora_target_modules": ["ALL"]}))
    s = _toml([source])
    assert s["training"]["lr_scheduler"] == "linear" and s["training"]["warmup_ratio"] == 0.05
    assert s["training"]["max_grad_norm"] == 0.5 and s["training"]["weight_decay"] == 0.01
    assert s["model"]["lora_dropout"] == 0.05 and s["model"]["lora_target_modules"] == ["all-linear"]
    assert s["checkpoint"]["every_steps"] == 5  # save_steps = eval_steps (5 in this file)
    assert s["data"]["seq_len"] == 2048 and s["checkpoint"]["keep_last"] == 2


def test_llamafactory_fsdp_list_is_fsdp_as_the_trainer_builds_it(tmp_path):
    """LLaMA-Factory's fp8 example is refused for fp8; the same file without its fp8 keys compiles
    as FSDP (it used to compile as DDP), the plugin the Trainer builds from its `fsdp` list."""
    fp8 = LF / "extras" / "fp8" / "llama3_fp8_fsdp_sft.yaml"
    with pytest.raises(ImportRefused, match="fp8 = True is fp8 training"):
        import_files([fp8])
    source = tmp_path / fp8.name
    source.write_text("".join(line for line in fp8.read_text().splitlines(True) if not line.startswith("fp8")))
    cfg = yaml.safe_load(source.read_text())
    theirs = trainer_fsdp_plugin(str(tmp_path / "o"), cfg["fsdp"])
    result = compile_text(to_toml(import_files([source])), path=tmp_path / "settings.toml")
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    assert result.plan.strategy.startswith("fsdp")
    f = result.settings.fsdp
    assert f.enabled and f.version == theirs["fsdp_version"]
    assert theirs["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP" and f.auto_wrap_policy == "transformer"
    assert f.reshard_after_forward is (theirs["reshard_after_forward"] in (True, "full_shard"))


@pytest.mark.parametrize("path", AXOLOTL_V1, ids=[p.name for p in AXOLOTL_V1])
def test_axolotl_fsdp_v1_is_the_trainers_plugin(path, tmp_path):
    """axolotl hands fsdp_config to the HF Trainer, whose FSDP1 plugin takes use_orig_params and
    sync_module_states as true when unset (TrainingArguments._process_fsdp_args); the real file sets
    both, the same file with both removed must import them true. full_shard beside
    reshard_after_forward = true, never false (a contradiction inside one artefact)."""
    cfg = yaml.safe_load(path.read_text())
    for drop in ((), ("fsdp_use_orig_params", "fsdp_sync_module_states")):
        fsdp_config = {k: v for k, v in cfg["fsdp_config"].items() if k not in drop}
        source = tmp_path / f"{len(drop)}-{path.name}"
        source.write_text(yaml.safe_dump({**cfg, "fsdp_config": fsdp_config}))
        theirs = trainer_fsdp_plugin(str(tmp_path / "o"), " ".join(cfg["fsdp"]), {**fsdp_config, "version": 1})
        ours = _toml([source])["fsdp"]
        assert ours["version"] == theirs["fsdp_version"] == 1
        assert (ours["use_orig_params"], ours["sync_module_states"]) == (theirs["use_orig_params"],
                                                                         theirs["sync_module_states"])
        assert ours["sharding_strategy"] == theirs["reshard_after_forward"] == "full_shard"
        assert ours["reshard_after_forward"] is True


@pytest.mark.parametrize("steps", [10.0, "10", 0.1])
def test_logging_steps_parsed_as_a_float_compiles(tmp_path, steps):
    """transformers 5 parses logging_steps as a float ("10" and 10.0 are 10.0): the import writes 10,
    which the compile accepts (it refused 10.0); a ratio of the run (0.1) is named, not written."""
    source = tmp_path / "args.json"
    source.write_text(json.dumps({"per_device_train_batch_size": 2, "lr_scheduler_type": "linear",
                                  "logging_steps": steps, "save_steps": 50}))
    imported = import_files([source])
    result = compile_text(to_toml(imported), path=tmp_path / "settings.toml")
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    if steps != 0.1:
        assert result.settings.training.log_every == 10 and result.settings.checkpoint.every_steps == 50
    else:
        assert any("logging_steps 0.1 is a ratio" in r for r in imported.remarks)


def test_no_model_path_or_an_unknown_optimizer_is_refused_naming_the_key(tmp_path):
    """axolotl without base_model: exit 1, the key named, nothing written (no toy model compiled)."""
    original = DATA / "fidelity3" / "axolotl-ai-cloud__axolotl" / "examples" / "LiquidAI" / "lfm2-350m-fft.yaml"
    source = tmp_path / "no-model.yaml"
    source.write_text("".join(line for line in original.read_text().splitlines(True)
                              if not line.startswith("base_model")))
    out = tmp_path / "settings.toml"
    proc = run_tuner("import", str(source), "-o", str(out))
    assert proc.returncode == 1 and "set base_model" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()
    source.write_text(original.read_text().replace("optimizer: adamw_torch_fused", "optimizer: adafactor"))
    with pytest.raises(ImportRefused, match="optimizer = 'adafactor' is an optimizer tuner does not train"):
        import_files([source])  # it used to be listed at the end of the file while AdamW trained
    lf = tmp_path / "lf.yaml"
    lf.write_text("stage: sft\nfinetuning_type: lora\ntemplate: qwen3\ncutoff_len: 1024\n")
    with pytest.raises(ImportRefused, match="set model_name_or_path"):
        import_files([lf])
