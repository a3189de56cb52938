"""Round 2 of the peer-config corpus (issue 23): public files from trl, alignment-handbook,
open-instruct, axolotl, LLaMA-Factory and modal-labs/llm-finetuning (axolotl configs), copied
under tests/compiler/data/peer2 (PROVENANCE.md there), imported and compiled, then judged with
accelerate's and DeepSpeed's own code (docs/interop.md), as tests/compiler/test_peer_configs.py
does for the first corpus:

* accelerate YAMLs: the launch accelerate derives from the source and from the compiled
  accelerate.yaml (mode, processes, every ACCELERATE_/FSDP_/PARALLELISM_CONFIG_ variable, the
  plugin, the effective DeepSpeed config at the world size);
* DeepSpeed JSONs (open-instruct's ``.conf`` files are JSON): the effective config DeepSpeed
  gets through accelerate from the source and from the compiled deepspeed.json;
* axolotl / LLaMA-Factory training YAMLs: the environment their launch gives accelerate (for
  axolotl, what `setup_fsdp_envs` / `setup_deepspeed_env` write, src/axolotl/utils/trainer.py;
  for LLaMA-Factory, the HF Trainer's DeepSpeed config file), the plugin accelerate builds in
  it, and the training values (micro batch, accumulation, lr, precision, LoRA, sequence length)
  tuner's artefacts run with.

Every file is either equivalent or listed in NOT_EQUIVALENT with its reason (docs/interop.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from tuner.runtime.verify import _environ, pretend_cuda
from tuner.compiler.compile import compile_text
from tuner.compiler.formats.importer import ImportRefused, import_files, to_toml

from tests.compiler.interop import FSDP_FIELDS, _plain, deepspeed_effective, launch_view, script_filled
from tests.compiler.test_peer_configs import _diff, equivalence_problems
from tests.conftest import REPO

PEER2 = REPO / "tests" / "compiler" / "data" / "peer2"
AXOLOTL = PEER2 / "axolotl-ai-cloud__axolotl"
LLAMAFACTORY = PEER2 / "hiyouga__LLaMA-Factory"
#: Repositories of launch configs (accelerate YAML, DeepSpeed JSON).
LAUNCH_REPOS = ("huggingface__trl", "huggingface__alignment-handbook", "allenai__open-instruct")
YAMLS = sorted(p for r in LAUNCH_REPOS for p in (PEER2 / r).rglob("*.yaml"))
JSONS = sorted(p for r in LAUNCH_REPOS for p in (PEER2 / r).rglob("*.conf"))
#: axolotl training YAMLs: axolotl's examples and a project's own configs (modal-labs/llm-finetuning).
AXOLOTL_YAMLS = sorted([*(AXOLOTL / "examples").rglob("*.y*ml"), *(PEER2 / "modal-labs__llm-finetuning").rglob("*.y*ml")])
LLAMAFACTORY_YAMLS = sorted((LLAMAFACTORY / "examples").rglob("*.yaml"))
#: The world size a training YAML's launcher picks (one process per GPU): the person sets it
#: after import, as the import's note asks.
WORLD = 8

#: Reviewed: file -> the reason it is not equivalent (asserted: `tuner import` exits 1 with it,
#: the import refused or the imported settings refused by the compile).
NOT_EQUIVALENT: dict[str, str] = {
    # LoRA under DeepSpeed trains (issue 34 item 8): axolotl's jamba/qlora_deepspeed.yaml and
    # LLaMA-Factory's train_lora/qwen3_lora_sft_ds3.yaml, refused before, are judged like the rest.
    # keys that change what is trained and that tuner cannot train (issue 34 item 3): refused by name
    "axolotl-ai-cloud__axolotl/examples/archived/tiny-llama/lora.yml": "load_in_8bit = True is LoRA on an 8-bit base",
    "axolotl-ai-cloud__axolotl/examples/mistral/bigstral/bigstral-ds-zero3.yaml": "unfrozen_parameters",
    "hiyouga__LLaMA-Factory/examples/extras/galore/llama3_full_sft.yaml": "use_galore = True is the GaLore optimizer",
}


def _refused(source: Path, reason: str, tmp_path: Path) -> None:
    try:
        text = to_toml(import_files([source]))
    except ImportRefused as exc:
        assert reason in str(exc)
        return
    result = compile_text(text, path=tmp_path / "settings.toml")
    assert not result.ok and any(reason in d.message for d in result.diagnostics.errors), text


def _id(path: Path) -> str:
    return str(path.relative_to(PEER2))


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("ACCELERATE_LOG_LEVEL", "error")
    monkeypatch.setenv("TUNER_PLATFORM", "cpu")  # the source's target must win over the host's


def _compile(source: Path, tmp_path: Path, overrides: tuple[str, ...] = ()):
    imported = import_files([source])
    text = to_toml(imported)
    settings = tmp_path / "settings.toml"
    settings.write_text(text)
    result = compile_text(text, overrides, path=settings)
    assert result.ok, text + "\n".join(d.format() for d in result.diagnostics.errors)
    result.write()
    return imported, result, text


@pytest.mark.parametrize("path", YAMLS, ids=[_id(p) for p in YAMLS])
def test_accelerate_config_imports_to_the_same_launch(path, tmp_path, monkeypatch):
    _, _, text = _compile(path, tmp_path)
    monkeypatch.chdir(path.parent)
    theirs = launch_view(path)
    monkeypatch.chdir(tmp_path)
    ours = launch_view(tmp_path / "build" / "accelerate.yaml")
    assert equivalence_problems(theirs, ours) == [], text


@pytest.mark.parametrize("path", JSONS, ids=[_id(p) for p in JSONS])
def test_deepspeed_json_imports_to_the_same_effective_config(path, tmp_path, monkeypatch):
    _, result, text = _compile(path, tmp_path, (f"num_processes={WORLD}",))
    world = result.plan.world_size
    theirs_yaml = tmp_path / "theirs.yaml"
    theirs_yaml.write_text(yaml.safe_dump({
        "compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED", "num_processes": world,
        "deepspeed_config": {"deepspeed_config_file": str(path)}}))
    theirs = launch_view(theirs_yaml)
    monkeypatch.chdir(tmp_path)
    ours = launch_view(tmp_path / "build" / "accelerate.yaml")
    assert equivalence_problems(theirs, ours) == [], text
    assert "optimizer" not in json.loads(result.deepspeed_json) or "optimizer" in json.loads(path.read_text())


def _stage(path: Path, root: Path, tmp_path: Path) -> Path:
    """The repository layout the training YAML's relative deepspeed path resolves in."""
    repo = tmp_path / "repo"
    shutil.copytree(root, repo)
    return repo / path.relative_to(root)


def _axolotl_env(cfg: dict, config_path: Path | None) -> dict[str, str]:
    """The accelerate environment `axolotl train` writes (src/axolotl/utils/trainer.py,
    `prepare_optim_env` -> `setup_fsdp_envs` / `setup_deepspeed_env`)."""
    env: dict[str, str] = {}
    fsdp = {k.removeprefix("fsdp_") if k != "fsdp_version" else k: v for k, v in (cfg.get("fsdp_config") or {}).items()}
    if cfg.get("fsdp") or cfg.get("fsdp_config"):
        env["ACCELERATE_USE_FSDP"] = "true"
        if str(cfg.get("fsdp_version") or fsdp.get("fsdp_version") or fsdp.get("version")) == "2":
            env["FSDP_VERSION"] = "2"
        for key, var in (("activation_checkpointing", "FSDP_ACTIVATION_CHECKPOINTING"),
                         ("offload_params", "FSDP_OFFLOAD_PARAMS"), ("sync_module_states", "FSDP_SYNC_MODULE_STATES"),
                         ("cpu_ram_efficient_loading", "FSDP_CPU_RAM_EFFICIENT_LOADING"),
                         ("use_orig_params", "FSDP_USE_ORIG_PARAMS"), ("reshard_after_forward", "FSDP_RESHARD_AFTER_FORWARD")):
            if fsdp.get(key):
                env[var] = "true"
        for key, var in (("state_dict_type", "FSDP_STATE_DICT_TYPE"), ("auto_wrap_policy", "FSDP_AUTO_WRAP_POLICY"),
                         ("transformer_layer_cls_to_wrap", "FSDP_TRANSFORMER_CLS_TO_WRAP"),
                         ("min_num_params", "FSDP_MIN_NUM_PARAMS")):
            if fsdp.get(key):
                env[var] = str(fsdp[key])
    elif config_path is not None:
        stage = (json.loads(config_path.read_text()).get("zero_optimization") or {}).get("stage")
        env.update(ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_CONFIG_FILE=str(config_path),
                   ACCELERATE_GRADIENT_ACCUMULATION_STEPS=str(cfg.get("gradient_accumulation_steps", 1)))
        if stage:
            env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] = str(stage)
            if stage == 3:
                env["ACCELERATE_DEEPSPEED_ZERO3_INIT"] = "true"
    bf16 = cfg.get("bf16")
    env["ACCELERATE_MIXED_PRECISION"] = ("bf16" if bf16 is True or str(bf16) == "auto" else
                                         "fp16" if cfg.get("fp16") else "no")
    return env


def _plugin_in(env: dict[str, str]) -> dict:
    """The plugin accelerate builds in `env` (the same fields launch_view reports)."""
    with _environ(env), pretend_cuda(8):
        if env.get("ACCELERATE_USE_FSDP") == "true":
            from accelerate.utils import FullyShardedDataParallelPlugin

            plugin = FullyShardedDataParallelPlugin()
            return {"plugin": {f: _plain(getattr(plugin, f, None)) for f in FSDP_FIELDS}}
        if env.get("ACCELERATE_USE_DEEPSPEED") == "true":
            from accelerate.utils import DeepSpeedPlugin

            plugin = DeepSpeedPlugin()
            return {"plugin": {"zero3_init_flag": plugin.zero3_init_flag,
                               "zero3_save_16bit_model": plugin.zero3_save_16bit_model}, "deepspeed_plugin": plugin}
    return {}


def _judge_trainer_yaml(cfg: dict, theirs_env: dict[str, str], imported, result, tmp_path: Path, monkeypatch) -> None:
    """What the training YAML's launch gives accelerate against what tuner's artefacts give it."""
    theirs = _plugin_in(theirs_env)
    monkeypatch.chdir(tmp_path)
    ours = launch_view(tmp_path / "build" / "accelerate.yaml")
    assert ours["num_processes"] == WORLD
    mp = theirs_env["ACCELERATE_MIXED_PRECISION"]
    if "deepspeed_plugin" in ours:
        # a DeepSpeed build's accelerate.yaml names no mixed precision (accelerate forbids it
        # beside a config file): tuner run / tuner launch give accelerate the settings' one
        assert result.settings.training.mixed_precision == mp
    else:
        assert ours["env"].get("ACCELERATE_MIXED_PRECISION", "no") == mp
    assert ours.get("plugin") == theirs.get("plugin")
    if "deepspeed_plugin" in theirs:
        te = deepspeed_effective(script_filled(theirs["deepspeed_plugin"], WORLD, mp), WORLD)
        # tuner run gives accelerate the settings' accumulation (Accelerator(gradient_accumulation_steps=...))
        ours["deepspeed_plugin"].fill_match("gradient_accumulation_steps", must_match=False,
                                            gradient_accumulation_steps=result.settings.training.gradient_accumulation_steps)
        oe = deepspeed_effective(script_filled(ours["deepspeed_plugin"], WORLD, mp), WORLD)
        assert _diff(te, oe) == []
    else:
        assert "deepspeed_plugin" not in ours


def _training_values(imported, pairs: dict[str, object]) -> None:
    for path, value in pairs.items():
        if value is not None:
            got = imported.values.get(path)
            assert got == value or (isinstance(value, str) and float(got) == float(value)), (path, got, value)


@pytest.mark.parametrize("path", AXOLOTL_YAMLS, ids=[_id(p) for p in AXOLOTL_YAMLS])
def test_axolotl_training_yaml_imports_to_what_axolotl_launches(path, tmp_path, monkeypatch):
    cfg = yaml.safe_load(path.read_text())
    source = _stage(path, PEER2 / _id(path).split("/")[0], tmp_path)
    if _id(path) in NOT_EQUIVALENT:
        _refused(source, NOT_EQUIVALENT[_id(path)], tmp_path)
        return
    imported, result, _ = _compile(source, tmp_path, (f"num_processes={WORLD}",))
    ds = cfg.get("deepspeed")
    env = _axolotl_env(cfg, (tmp_path / "repo" / ds) if isinstance(ds, str) else None)
    _judge_trainer_yaml(cfg, env, imported, result, tmp_path, monkeypatch)
    _training_values(imported, {"training.micro_batch_size": cfg.get("micro_batch_size"),
                                "training.gradient_accumulation_steps": cfg.get("gradient_accumulation_steps"),
                                "training.learning_rate": cfg.get("learning_rate"), "data.seq_len": cfg.get("sequence_len"),
                                "model.lora_rank": cfg.get("lora_r"), "model.lora_alpha": cfg.get("lora_alpha"),
                                "model.path": cfg.get("base_model")})
    if cfg.get("adapter") in ("lora", "qlora"):
        assert imported.values["model.type"] == "lora"


@pytest.mark.parametrize("path", LLAMAFACTORY_YAMLS, ids=[_id(p) for p in LLAMAFACTORY_YAMLS])
def test_llamafactory_training_yaml_imports_to_what_it_launches(path, tmp_path, monkeypatch):
    cfg = yaml.safe_load(path.read_text())
    source = _stage(path, LLAMAFACTORY, tmp_path)
    if _id(path) in NOT_EQUIVALENT:
        _refused(source, NOT_EQUIVALENT[_id(path)], tmp_path)
        return
    imported, result, _ = _compile(source, tmp_path, (f"num_processes={WORLD}",))
    env = {"ACCELERATE_MIXED_PRECISION": "bf16" if cfg.get("bf16") else "fp16" if cfg.get("fp16") else "no"}
    if cfg.get("deepspeed"):  # the HF Trainer hands its DeepSpeed file to accelerate
        ds = tmp_path / "repo" / cfg["deepspeed"]
        stage = (json.loads(ds.read_text()).get("zero_optimization") or {}).get("stage")
        env.update(ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_CONFIG_FILE=str(ds),
                   ACCELERATE_GRADIENT_ACCUMULATION_STEPS=str(cfg.get("gradient_accumulation_steps", 1)))
        if stage == 3:
            env["ACCELERATE_DEEPSPEED_ZERO3_INIT"] = "true"
    _judge_trainer_yaml(cfg, env, imported, result, tmp_path, monkeypatch)
    _training_values(imported, {"training.micro_batch_size": cfg.get("per_device_train_batch_size"),
                                "training.gradient_accumulation_steps": cfg.get("gradient_accumulation_steps"),
                                "training.learning_rate": cfg.get("learning_rate"), "data.seq_len": cfg.get("cutoff_len"),
                                "model.lora_rank": cfg.get("lora_rank"), "model.path": cfg.get("model_name_or_path")})
    assert imported.values["model.type"] == ("lora" if cfg.get("finetuning_type") == "lora" else "full")
