"""`tuner import` reads each known format by its structure and keeps its distributed choices
(issue #9 items 3-6). In-process and fast: import -> compile, then the compiled accelerate
YAML and manifest are checked; accelerate's own reading of such files is judged in
test_peer_configs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tuner.compiler.compile import compile_text
from tuner.compiler.formats import FORMATS, detect
from tuner.compiler.formats.base import load
from tuner.compiler.formats.importer import ImportRefused, import_files, to_toml
from tuner.compiler.plan.rules import MSG_CP_NEEDS_FSDP2

from tests.conftest import PEER_CONFIGS, REPO, run_tuner

DATA = REPO / "tests" / "compiler" / "data"
#: The files this test has read since issue 9; the corpus of issue 34 is tests/compiler/test_simpletuner_fidelity.py's.
SIMPLETUNER = [DATA / "simpletuner" / name for name in (
    "fsdp2-full.toml", "ltxvideo2-2.3-dev-1080p-8xh100.peft-lora+cp-fa3.json",
    "ltxvideo2-2.3-dev-720p-8xh100.peft-lora+cp-fa3.json", "webui-config.json")]


@pytest.fixture(autouse=True)
def _cpu_host(monkeypatch):
    """Import judges the source's target, not this (GPU-less) machine."""
    monkeypatch.setenv("TUNER_PLATFORM", "cpu")


def _compile(paths: list[Path], tmp_path: Path):
    imported = import_files(paths)
    text = to_toml(imported)
    settings = tmp_path / "settings.toml"
    settings.write_text(text)
    result = compile_text(text, path=settings)
    assert result.ok, text + "\n".join(d.format() for d in result.diagnostics.errors)
    return imported, text, result, yaml.safe_load(result.accelerate_yaml)


def _yaml(tmp_path: Path, cfg: dict) -> Path:
    path = tmp_path / "src.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


BASE = {"compute_environment": "LOCAL_MACHINE", "mixed_precision": "bf16", "num_machines": 1, "use_cpu": False}


# --- item 4: formats recognised by structure ---------------------------------------------------

@pytest.mark.parametrize(("name", "fmt"), [
    ("formats/accelerate_config.json", "accelerate"),
    ("formats/hf_trainer_fsdp.json", "hf-trainer"),
    ("formats/hf_trainer_deepspeed.json", "hf-trainer"),
    ("formats/ms_swift_args.json", "ms-swift"),
    ("simpletuner/config.json.example", "simpletuner"),
    ("simpletuner/ltxvideo2-2.3-dev-720p-8xh100.peft-lora+cp-fa3.json", "simpletuner"),
    ("simpletuner/fsdp2-full.toml", "simpletuner"),
    ("simpletuner/webui-config.json", "simpletuner-webui"),
    ("trl/fsdp_qlora.yaml", "accelerate"),
])
def test_format_is_recognised_by_structure(name, fmt):
    assert detect(load(DATA / name)) == fmt


def test_a_simpletuner_config_with_optimizer_and_batch_keys_is_not_deepspeed():
    """The old rule sent any top-level optimizer / train_batch_size to the DeepSpeed path."""
    data = load(DATA / "simpletuner/ltxvideo2-2.3-dev-720p-8xh100.peft-lora+cp-fa3.json")
    assert "optimizer" in data and "train_batch_size" in data and detect(data) == "simpletuner"


def test_unrecognised_file_is_refused_naming_the_known_formats(tmp_path):
    src = DATA / "formats/unrelated.json"
    with pytest.raises(ImportRefused, match="not a format tuner knows"):
        import_files([src])
    out = tmp_path / "s.toml"
    proc = run_tuner("import", str(src), "-o", str(out))
    assert proc.returncode == 1, proc.stderr
    assert all(desc in proc.stderr for desc in FORMATS.values()) and "Traceback" not in proc.stderr
    assert not out.exists()


def test_accelerate_config_written_as_json_keeps_its_strategy(tmp_path):
    _, _, result, cfg = _compile([DATA / "formats/accelerate_config.json"], tmp_path)
    assert cfg["distributed_type"] == "FSDP" and cfg["fsdp_config"]["fsdp_version"] == 2
    assert cfg["num_processes"] == 4 and cfg["gpu_ids"] == "0,1,2,3" and result.plan.platform == "cuda"


def test_hf_trainer_fsdp_json_maps_fsdp_and_fsdp_config(tmp_path):
    imported, text, result, cfg = _compile([DATA / "formats/hf_trainer_fsdp.json"], tmp_path)
    f = cfg["fsdp_config"]
    # judged as the Trainer builds its plugin (issue 34 item 5): this transformers' own defaults
    from tests.compiler.fidelity_expect import trainer_fsdp_plugin

    source = json.loads((DATA / "formats/hf_trainer_fsdp.json").read_text())
    theirs = trainer_fsdp_plugin(str(tmp_path / "o"), source["fsdp"], source["fsdp_config"])
    assert cfg["distributed_type"] == "FSDP" and f["fsdp_version"] == theirs["fsdp_version"]
    assert f["fsdp_auto_wrap_policy"] == theirs["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert f["fsdp_transformer_layer_cls_to_wrap"] == theirs["transformer_cls_names_to_wrap"] == "LlamaDecoderLayer"
    assert f["fsdp_cpu_ram_efficient_loading"] is theirs["cpu_ram_efficient_loading"] is True
    assert f["fsdp_state_dict_type"] == theirs["state_dict_type"]
    if theirs["fsdp_version"] == 1:
        assert f["fsdp_use_orig_params"] is theirs["use_orig_params"] is False and f["fsdp_forward_prefetch"] is True
        assert f["fsdp_backward_prefetch"] == "BACKWARD_POST" and f["fsdp_reshard_after_forward"] == "FULL_SHARD"
    else:  # transformers 5: FSDP2 unless fsdp_config says version 1; its FSDP1 options are named, not carried
        assert f["fsdp_reshard_after_forward"] is theirs["reshard_after_forward"] is True
        assert any("use_orig_params" in r and "FSDP2" in r for r in imported.remarks), imported.remarks
    s = result.settings.training
    assert (s.micro_batch_size, s.gradient_accumulation_steps, s.lr_scheduler, s.optimizer) == (4, 2, "cosine", "adamw")
    assert cfg["mixed_precision"] == "bf16" and result.settings.training.num_epochs == 3
    # the keys that are not about distributed training: one note, and listed in the file
    notes = [r for r in imported.remarks if "not about distributed training" in r]
    assert len(notes) == 1 and "dataset_text_field" in notes[0] and "report_to" in notes[0]
    assert "#   dataset_text_field = " in text


def test_hf_trainer_json_with_inline_deepspeed_keeps_auto(tmp_path):
    _, text, result, _ = _compile([DATA / "formats/hf_trainer_deepspeed.json"], tmp_path)
    assert result.plan.strategy == "zero3"
    assert result.settings.deepspeed.config["train_micro_batch_size_per_gpu"] == "auto"  # kept for the Trainer
    assert "world size" in text or "processes run it" in text  # the note: the launch decides the world size


def test_ms_swift_args_are_not_a_deepspeed_config(tmp_path):
    _, _, result, cfg = _compile([DATA / "formats/ms_swift_args.json"], tmp_path)
    assert result.settings.model.type == "lora" and not result.plan.uses_deepspeed
    assert result.settings.training.gradient_accumulation_steps == 16 and cfg["distributed_type"] == "NO"


# --- item 3: accelerate keys survive -----------------------------------------------------------

def test_fsdp_v1_flags_survive_import(tmp_path):
    src = _yaml(tmp_path, {**BASE, "distributed_type": "FSDP", "num_processes": 8, "fsdp_config": {
        "fsdp_forward_prefetch": True, "fsdp_use_orig_params": False, "fsdp_sync_module_states": False,
        "fsdp_cpu_ram_efficient_loading": False, "fsdp_sharding_strategy": "FULL_SHARD"}})
    _, _, _, cfg = _compile([src], tmp_path)
    f = cfg["fsdp_config"]
    assert (f["fsdp_forward_prefetch"], f["fsdp_use_orig_params"], f["fsdp_sync_module_states"]) == (True, False, False)
    assert f["fsdp_version"] == 1 and f["fsdp_cpu_ram_efficient_loading"] is False


def test_unset_fsdp_keys_take_accelerates_meaning_not_tuners(tmp_path):
    src = _yaml(tmp_path, {**BASE, "distributed_type": "FSDP", "num_processes": 2, "fsdp_config": {"fsdp_version": 2}})
    _, _, result, cfg = _compile([src], tmp_path)
    f = cfg["fsdp_config"]
    assert f["fsdp_auto_wrap_policy"] == "NO_WRAP"  # accelerate wraps nothing without a policy
    assert f["fsdp_cpu_ram_efficient_loading"] is True  # accelerate launch's default
    assert f["fsdp_state_dict_type"] == "SHARDED_STATE_DICT"  # the plugin's default for FSDP2


def test_deepspeed_yaml_flags_and_gpu_ids_survive(tmp_path):
    src = _yaml(tmp_path, {**BASE, "distributed_type": "DEEPSPEED", "num_processes": 2, "gpu_ids": [2, 3],
                           "deepspeed_config": {"zero_stage": 3, "zero3_init_flag": True, "zero3_save_16bit_model": False}})
    _, _, result, cfg = _compile([src], tmp_path)
    assert cfg["deepspeed_config"]["zero3_init_flag"] is True and cfg["gpu_ids"] == "2,3"
    ds = json.loads(result.deepspeed_json)
    assert ds["zero_optimization"]["stage"] == 3
    assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is False


def test_distributed_type_no_with_eight_processes_is_one_process(tmp_path):
    src = _yaml(tmp_path, {**BASE, "distributed_type": "NO", "num_processes": 8})
    imported, _, result, cfg = _compile([src], tmp_path)
    assert cfg["distributed_type"] == "NO" and cfg["num_processes"] == 1 and result.plan.world_size == 1
    assert any("launches one process" in r for r in imported.remarks)


def test_sequence_parallelism_under_deepspeed_is_kept(tmp_path):
    _, _, _, cfg = _compile([DATA / "trl/alst_ulysses_4gpu.yaml"], tmp_path)
    pc = cfg["parallelism_config"]
    assert pc["parallelism_config_sp_size"] == 2 and pc["parallelism_config_sp_backend"] == "deepspeed"
    assert pc["parallelism_config_dp_shard_size"] == 2 and cfg["distributed_type"] == "DEEPSPEED"


# --- item 5: SimpleTuner's vocabulary and shipped files ---------------------------------------

@pytest.mark.parametrize("path", SIMPLETUNER, ids=[p.name for p in SIMPLETUNER])
def test_simpletuner_shipped_configs_import_and_compile_with_their_choices(path, tmp_path):
    imported, text, result, cfg = _compile([path], tmp_path)
    source = load(path)
    source = source.get("config", source)
    raw = {k.lstrip("-"): v for k, v in source.items()}
    s, plan = result.settings, result.plan
    assert plan.platform == "cuda"
    assert s.training.mixed_precision == raw.get("mixed_precision", "bf16")  # SimpleTuner's defaults (issue 34)
    assert s.training.lr_scheduler == raw.get("lr_scheduler", "constant_with_warmup")
    if raw.get("optimizer") == "adamw_bf16":
        assert s.training.optimizer == "adamw"
    if raw.get("max_train_steps"):
        assert s.training.max_steps == raw["max_train_steps"] and s.training.num_epochs == 0
    cp = int(raw.get("context_parallel_size", 1))
    if cp > 1:  # SimpleTuner's standalone CP: kept, and the launch is plain multi-GPU
        assert s.context_parallel.size == cp and s.context_parallel.standalone
        assert s.context_parallel.comm_strategy == raw["context_parallel_comm_strategy"]
        assert cfg["distributed_type"] == "MULTI_GPU" and "parallelism_config" not in cfg
        assert result.manifest["topology"]["context_parallel_size"] == cp
        assert plan.world_size % cp == 0 and plan.world_size == int(raw.get("num_processes", cp))
    if str(raw.get("fsdp_enable", "false")).lower() == "true":
        assert plan.strategy == "fsdp2" and cfg["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"] == (
            "FluxTransformerBlock,FluxSingleTransformerBlock")
        assert cfg["num_processes"] == 8 and s.training.gradient_accumulation_steps == 2
    family = raw["model_family"]
    assert s.model.family in (family, "diffusion")  # known names map to tuner's family, others are kept
    notes = [r for r in imported.remarks if "not about distributed training" in r]
    assert len(notes) <= 1 and not any("data_backend_config" in n for n in notes)
    # the datasets are SimpleTuner's data-backend file: named in their own note (issue 34)
    assert any("data_backend_config" in r and "data.path stays" in r for r in imported.remarks)


def test_an_untrainable_family_compiles_with_a_note_and_tuner_run_refuses_it(tmp_path):
    settings = tmp_path / "settings.toml"
    settings.write_text('[model]\nfamily = "ltxvideo2"\n[hardware]\nplatform = "cpu"\n')
    result = compile_text(settings.read_text(), path=settings)
    assert result.ok and any("tuner run cannot train model family 'ltxvideo2'" in d.message
                             for d in result.diagnostics.items)
    result.write()
    proc = run_tuner("run", str(tmp_path / "build"))
    assert proc.returncode == 1 and "cannot train model family 'ltxvideo2'" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "output").exists()  # refused before any rank


def test_the_seeds_cp_rule_still_holds_without_standalone(tmp_path):
    text = '[hardware]\nplatform = "cuda"\nnum_processes = 2\n[context_parallel]\nsize = 2\n'
    result = compile_text(text, path=tmp_path / "s.toml")
    assert [d.message for d in result.diagnostics.errors] == [MSG_CP_NEEDS_FSDP2]


def test_epochs_zero_needs_steps(tmp_path):
    text = '[hardware]\nplatform = "cpu"\n[training]\nmax_steps = 0\nnum_epochs = 0\n'
    result = compile_text(text, path=tmp_path / "s.toml")
    assert any(d.key == "training.num_epochs" for d in result.diagnostics.errors)


# --- item 6: the source's target, not the host ------------------------------------------------

def test_fsdp_v1_config_imports_on_a_machine_without_gpus(tmp_path):
    src = PEER_CONFIGS / "llamafactory/accelerate/fsdp_v1_config.yaml"
    if not src.is_file():
        src = _yaml(tmp_path, {**BASE, "distributed_type": "FSDP", "num_processes": 2, "fsdp_config": {"fsdp_version": 1}})
    if "num_processes" not in src.read_text():  # the upstream file leaves it to --num_processes (issue 23 item 6)
        (tmp_path / "with_count.yaml").write_text(src.read_text() + "\nnum_processes: 8\n")
        src = tmp_path / "with_count.yaml"
    out = tmp_path / "settings.toml"
    proc = run_tuner("import", str(src), "-o", str(out), env={"TUNER_PLATFORM": "cpu"})
    assert proc.returncode == 0, proc.stderr
    assert 'platform = "cuda"' in out.read_text()


def test_hf_trainer_json_naming_its_deepspeed_file(tmp_path):
    """`deepspeed` as a path (how trl/TRL CLIs save it) is read relative to the JSON."""
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 2}, "train_batch_size": "auto",
                                                  "train_micro_batch_size_per_gpu": "auto"}))
    args = json.loads((DATA / "formats/hf_trainer_deepspeed.json").read_text())
    args["deepspeed"] = "ds.json"
    src = tmp_path / "args.json"
    src.write_text(json.dumps(args))
    _, _, result, cfg = _compile([src], tmp_path)
    assert result.plan.strategy == "zero2" and cfg["distributed_type"] == "DEEPSPEED"
    assert result.settings.deepspeed.config["train_batch_size"] == "auto"


def test_another_trainers_optimizer_name_is_mapped_with_a_note():
    imported = import_files([DATA / "simpletuner/flux.peft-lora.json"])
    text = to_toml(imported)
    assert 'optimizer = "adamw"' in text
    assert any("'adamw_bf16' is written as 'adamw'" in r for r in imported.remarks)
