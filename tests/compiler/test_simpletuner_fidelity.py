"""A SimpleTuner config means the same after `tuner import` (issue 34, SimpleTuner part).

Field by field, the compiled settings are compared with what SimpleTuner would train: the file's
value, or SimpleTuner's own default for a key the file leaves unset, each read from SimpleTuner's
code at bghira/SimpleTuner@bc8e6ab7738ce457a2ed8eb2d26cadd91c6442cb and cited below, written here
independently of tuner's tables (compiler/formats/simpletuner_defaults.py, simpletuner_models.py).
Every key of every file is carried, named in its own note, or (only a key that does not change
what is trained) listed in the one catch-all note; a file tuner cannot train as written is
refused (exit 1) naming the key. The corpus: tests/compiler/data/simpletuner/ (PROVENANCE.md).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from tuner.compiler.compile import compile_text
from tuner.compiler.formats.base import load
from tuner.compiler.formats.importer import ImportRefused, import_files, to_toml

from tests.conftest import run_tuner

DATA = Path(__file__).parent / "data" / "simpletuner"
#: field_registry/sections/ of SimpleTuner at the commit above ("S/" below)
S = "simpletuner/simpletuner_sdk/server/services/field_registry/sections/"

#: SimpleTuner key -> (its value when the file leaves it unset, where SimpleTuner sets it).
ST_DEFAULT: dict[str, tuple[Any, str]] = {
    "model_type": ("full", "S/model.py:203"),
    "mixed_precision": ("bf16", "S/advanced.py:689"),
    "optimizer": ("adamw_bf16", "S/training.py:114"),
    "learning_rate": (4e-7, "S/training.py:89"),
    "lr_scheduler": ("constant_with_warmup", "S/training.py:147"),
    "lr_warmup_steps": (0, "S/training.py:186"),
    "train_batch_size": (4, "S/training.py:67"),
    "gradient_accumulation_steps": (1, "S/memory.py:24"),
    "num_train_epochs": (1, "S/training.py:26"),
    "max_train_steps": (None, "S/training.py:48: None, the epochs decide (tuner's max_steps = 0)"),
    "gradient_checkpointing": (True, "S/training.py:224"),
    "use_ema": (False, "S/training.py:826"),
    "ema_decay": (0.995, "S/training.py:928"),
    "checkpoints_total_limit": (5, "S/training.py:204"),
    "checkpoint_step_interval": (500, "S/logging_fields.py:79 (alias --checkpointing_steps)"),
    "output_dir": ("simpletuner-results", "S/model.py:148"),
    "resolution": (1024, "S/data.py:26"),
    "caption_dropout_probability": (0.1, "S/advanced.py:1189"),
    "max_grad_norm": (2.0, "S/optimizer.py:234"),
    "grad_clip_method": ("value", "S/optimizer.py:272"),
    "lora_rank": (16, "S/lora.py:25"),
    "lora_dropout": (0.1, "S/lora.py:137"),
    "lr_end": (4e-7, "S/advanced.py:921"),
    "lr_power": (0.8, "S/training.py:787"),
    "adam_weight_decay": (0.01, "S/optimizer.py:176; used only by DeepSpeed's optimizer, trainer.py:4139"),
    "resume_from_checkpoint": ("latest", "S/model.py:284; none there: a fresh start, trainer.py:5031"),
    "tracker_project_name": ("simpletuner", "S/logging_fields.py:230"),
    "logging_dir": ("logs", "S/logging_fields.py:272"),
    "fsdp_version": (2, "S/advanced.py:1684"),
    "fsdp_reshard_after_forward": (True, "S/advanced.py:1705"),
    "fsdp_state_dict_type": ("SHARDED_STATE_DICT", "S/advanced.py:1722"),
    "fsdp_cpu_ram_efficient_loading": (False, "S/advanced.py:1743"),
    "fsdp_cpu_offload": (False, "S/advanced.py:1799"),
}
#: Without DeepSpeed the optimizer's weight decay is its own default_settings' (then optimizer_config's),
#: simpletuner/helpers/training/optimizer_param.py:912-925: adamw_bf16's is 1e-2 (line 195).
OPTIMIZER_WEIGHT_DECAY = {"adamw_bf16": 0.01, "optimi-lion": 0.0}  # optimi-lion: line 331
#: The model SimpleTuner trains when pretrained_model_name_or_path is unset: HUGGINGFACE_PATHS[flavour],
#: the class's DEFAULT_MODEL_FLAVOUR when unset (simpletuner/helpers/models/common.py:1214-1228).
FLUX_KREA = "black-forest-labs/flux.1-krea-dev"  # flux/model.py:89 default "krea", :92
LTX_23 = "dg845/LTX-2.3-Diffusers"  # ltxvideo2/model.py:198
DERIVED_PATH = {
    "flux.peft-lora.json": FLUX_KREA, "flux.peft-lora+TREAD.json": FLUX_KREA, "flux-full.json": FLUX_KREA,
    "flux-full+deepspeed.json": FLUX_KREA,
    "kontext.peft-lora.json": "black-forest-labs/flux.1-kontext-dev",  # flux/model.py:94
    "fsdp2-sdxl-full.json": "stabilityai/stable-diffusion-xl-base-1.0",  # sdxl/model.py:86 default "base-1.0", :88
    "ltxvideo2-2.3-dev-1080p-8xh100.peft-lora+cp-fa3.json": LTX_23,
    "ltxvideo2-2.3-dev-720p-8xh100.peft-lora+cp-fa3.json": LTX_23,
    "ltxvideo2-2.3-dev-720p-single-gpu.peft-lora+ramtorch.json": LTX_23, "webui-config.json": LTX_23,
    "qwen_image.peft-lora.json": "Qwen/Qwen-Image",  # qwen_image/model.py:84
    "sd3.peft-lora.json": "stabilityai/stable-diffusion-3.5-medium",  # sd3/model.py:135 default "medium", :137
    "wan2.1-t2v-14b-480p-8xh100.peft-lora+cp-fa3.json": "Wan-AI/Wan2.1-T2V-14B-Diffusers",  # wan/model.py:309
    "z-image-turbo.peft-lora.json": "TONGYI-MAI/Z-Image-Turbo",  # z_image/model.py:60
}
TRAINED = sorted([*DERIVED_PATH, "deepfloyd-if-i-medium.peft-lora.json", "sd1x-dreamshaper.peft-lora.json",
                  "fsdp2-full.toml", "webui-default.json"])
#: Files tuner cannot train as written -> the keys the refusal names.
REFUSED = {
    "ace_step-v1-0.peft-lora.json": ["lr_scheduler = 'cosine'"],  # SimpleTuner's own restarting cosine
    "bria.lycoris-lokr.json": ["pretrained_model_name_or_path", "lora_type = 'lycoris'"],  # no bria at this commit
    "config.json.example": ["lora_type = 'lycoris'"],
    "sdxl.lycoris-lokr.json": ["lora_type = 'lycoris'"],
    "sdxl.peft-controlnet-lora.json": ["controlnet = True"],
    "wan2.1-t2v-1.3b-480p-141g.peft-lora+anyflow.json": ["distillation_method = 'anyflow'"],
}
#: Keys of the corpus that do not change what is trained (sampling, publishing, the data backends'
#: preparation, memory placement and kernels: field_registry sections validation_*, publishing,
#: caching, image_processing, vae_config, memory_optimization, hardware): the catch-all may list these.
NOT_TRAINING = {
    "aspect_bucket_rounding", "attention_mechanism", "compress_disk_cache", "conditioning_multidataset_sampling",
    "delete_problematic_images", "disable_benchmark", "disable_bucket_pruning", "fuse_qkv_projections",
    "gradient_checkpointing_interval", "hub_model_id", "minimum_image_size", "musubi_blocks_to_swap",
    "num_eval_images", "offload_during_startup", "push_checkpoints_to_hub", "push_to_hub", "ramtorch",
    "ramtorch_disable_extensions", "ramtorch_disable_sync_hooks", "ramtorch_target_modules", "ramtorch_text_encoder",
    "ramtorch_transformer_percent", "resolution_type", "skip_file_discovery", "vae_batch_size",
    "vae_enable_patch_conv", "vae_enable_slicing", "vae_enable_temporal_roll", "vae_enable_tiling",
    "validation_disable_unconditional", "validation_guidance", "validation_guidance_rescale",
    "validation_guidance_skip_layers", "validation_lycoris_strength", "validation_negative_prompt",
    "validation_num_inference_steps", "validation_num_video_frames", "validation_prompt", "validation_prompt_library",
    "validation_resolution", "validation_seed",
}


def _raw(path: Path) -> dict[str, Any]:
    data = load(path)
    data = data.get("config", data)
    return {k.lstrip("-"): v for k, v in data.items()}


def _value(raw: dict[str, Any], key: str) -> Any:
    return raw[key] if key in raw else ST_DEFAULT[key][0]


def simpletuner_trains(name: str, raw: dict[str, Any]) -> dict[str, Any]:
    """tuner key -> what SimpleTuner trains with, from the file and SimpleTuner's defaults."""
    ds = "deepspeed_config" in raw
    v = lambda key: _value(raw, key)  # noqa: E731
    steps = v("max_train_steps")
    want = {
        "model.path": raw.get("pretrained_model_name_or_path") or DERIVED_PATH[name],
        "model.type": v("model_type"),
        "training.mixed_precision": v("mixed_precision"),
        "training.learning_rate": float(v("learning_rate")),
        "training.lr_scheduler": v("lr_scheduler"),
        "training.warmup_steps": v("lr_warmup_steps"),
        "training.micro_batch_size": v("train_batch_size"),
        "training.gradient_accumulation_steps": v("gradient_accumulation_steps"),
        "training.max_steps": steps or 0,
        "training.num_epochs": v("num_train_epochs"),
        "training.gradient_checkpointing": v("gradient_checkpointing"),
        "training.ema": v("use_ema"),
        "training.ema_decay": v("ema_decay"),
        "checkpoint.keep_last": v("checkpoints_total_limit"),
        "checkpoint.every_steps": raw.get("checkpointing_steps", v("checkpoint_step_interval")),
        "checkpoint.resume": "auto" if v("resume_from_checkpoint") == "latest" else v("resume_from_checkpoint"),
        "output.dir": v("output_dir"),
        "data.resolution": v("resolution"),
        "data.caption_dropout": v("caption_dropout_probability"),
        "data.validation_split": 0.0,  # SimpleTuner evaluates on its own data backends, it holds no rows out
        "logging.project": v("tracker_project_name"),
        "logging.dir": v("logging_dir"),
        "training.weight_decay": v("adam_weight_decay") if ds else OPTIMIZER_WEIGHT_DECAY[v("optimizer")],
    }
    fsdp = str(raw.get("fsdp_enable", "false")).lower() == "true"
    # clipping, simpletuner/helpers/training/trainer.py:7138-7212: never for prodigy/optimi-stableadamw;
    # under DeepSpeed the engine clips the norm; under FSDP value clipping is skipped
    if v("optimizer") in ("prodigy", "optimi-stableadamw"):
        want["training.max_grad_norm"] = 0.0
    elif ds:
        want |= {"deepspeed.config": raw["deepspeed_config"], "training.clip_method": "norm"}
    elif fsdp and v("grad_clip_method") == "value":
        want["training.max_grad_norm"] = 0.0
    else:
        want |= {"training.max_grad_norm": v("max_grad_norm"), "training.clip_method": v("grad_clip_method")}
    if "seed" in raw:
        want["training.seed"] = raw["seed"]
    if "tracker_run_name" in raw:
        want["logging.run_name"] = raw["tracker_run_name"]
    if want["model.type"] == "lora":
        rank = v("lora_rank")
        want |= {"model.lora_rank": rank, "model.lora_dropout": v("lora_dropout"),
                 "model.lora_alpha": raw.get("lora_alpha", rank)}  # unset: the rank, models/common.py:1092
    if want["training.lr_scheduler"] == "polynomial":
        want |= {"training.lr_end": v("lr_end"), "training.lr_power": v("lr_power")}
    if fsdp:
        want |= {"fsdp.enabled": True, "fsdp.version": int(v("fsdp_version")),
                 "fsdp.reshard_after_forward": v("fsdp_reshard_after_forward"),
                 "checkpoint.state_dict_type": {"SHARDED_STATE_DICT": "sharded", "FULL_STATE_DICT": "full"}[
                     v("fsdp_state_dict_type")],
                 "fsdp.cpu_ram_efficient_loading": v("fsdp_cpu_ram_efficient_loading"),
                 "fsdp.offload_params": v("fsdp_cpu_offload")}
    if int(raw.get("context_parallel_size", 1)) <= 1:  # with CP, the CP size (and a note to raise it)
        want["hardware.num_processes"] = raw.get("num_processes", 1)  # S/advanced.py:1909
    else:
        want |= {"context_parallel.size": raw["context_parallel_size"],
                 "context_parallel.comm_strategy": raw.get("context_parallel_comm_strategy", "allgather")}
    return want


#: Where tuner trains otherwise and must say so in a note of its own: (tuner key, words the note holds).
NAMED = [
    ("training.optimizer", "'adamw_bf16' is written as 'adamw'"),  # and the eps/bf16-state note
    ("data.path", "data.path stays"),
    ("model.lora_target_modules", "LoRA target layers"),
]


def _setting(result, key: str) -> Any:
    section, name = key.split(".")
    return getattr(getattr(result.settings, section), name)


@pytest.fixture(scope="module")
def imported() -> dict[str, tuple[Any, str, Any]]:
    out = {}
    for name in TRAINED:
        imp = import_files([DATA / name])
        text = to_toml(imp)
        out[name] = (imp, text, compile_text(text, path=DATA / "settings.toml"))
    return out


@pytest.mark.parametrize("name", TRAINED)
def test_every_field_is_what_simpletuner_trains_or_is_named(name, imported):
    imp, _, result = imported[name]
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    raw = _raw(DATA / name)
    wrong = {key: (_setting(result, key), want) for key, want in simpletuner_trains(name, raw).items()
             if _setting(result, key) != want
             and not (isinstance(want, float) and math.isclose(_setting(result, key), want))}
    assert wrong == {}, wrong  # tuner key: (compiled, what SimpleTuner trains)
    assert result.settings.model.path != "builtin"  # never tuner's toy model in place of SimpleTuner's
    remarks = imp.remarks
    if "seed" not in raw:  # SimpleTuner draws a new seed each run (S/model.py:230)
        assert any("seed unset" in r for r in remarks)
    for key, words in NAMED:
        if key == "training.optimizer" and _value(raw, "optimizer") != "adamw_bf16":
            continue
        if key == "model.lora_target_modules" and _value(raw, "model_type") != "lora":
            continue
        assert any(words in r for r in remarks), (key, words)


@pytest.mark.parametrize("name", TRAINED)
def test_every_key_of_the_file_is_carried_or_named(name, imported):
    """No key that changes what is trained ends in the catch-all list; every other key is
    carried (a tuner setting) or named in a note of its own."""
    imp, text, _ = imported[name]
    raw = _raw(DATA / name)
    listed = set(imp.not_distributed.get(name, {}))
    assert listed <= NOT_TRAINING, listed - NOT_TRAINING
    carried = {"model_family", "model_flavour", "pretrained_model_name_or_path", "model_type", "lora_type",
               "num_processes", "fsdp_enable", "fsdp_auto_wrap_policy", "fsdp_transformer_layer_cls_to_wrap",
               "report_to", "base_model_precision", *ST_DEFAULT, "seed", "tracker_run_name", "context_parallel_size",
               "context_parallel_comm_strategy", "deepspeed_config", "lora_alpha", "validation_steps", "controlnet",
               # the diffusion objectives, read by their SimpleTuner names (compiler/keys/sections/loop.py)
               "flow_schedule_shift", "flow_schedule_auto_shift", "flow_timestep_sampling", "flow_logit_mean",
               "flow_logit_std", "snr_gamma", "noise_offset"}
    own_notes = [r for r in imp.remarks if "not about distributed training" not in r]
    for key in set(raw) - listed - carried:
        assert any(f"{key} = " in r for r in own_notes), f"{key} is neither carried nor named in a note of its own"
    assert "model.path" not in text or 'path = "builtin"' not in text


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_config_tuner_cannot_train_as_written_is_refused_naming_each_key(name):
    with pytest.raises(ImportRefused) as err:
        import_files([DATA / name])
    for words in REFUSED[name]:
        assert words in str(err.value)


def test_the_refusal_is_exit_1_with_nothing_written(tmp_path):
    out = tmp_path / "settings.toml"
    proc = run_tuner("import", str(DATA / "sdxl.lycoris-lokr.json"), "-o", str(out))
    assert proc.returncode == 1 and "lora_type = 'lycoris'" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("drop, keep, words", [
    (("pretrained_model_name_or_path",), {}, "model_family 'deepfloyd' has no default model_flavour"),
    (("pretrained_model_name_or_path", "model_family", "model_flavour"), {}, "no model_family"),
    (("pretrained_model_name_or_path",), {"model_flavour": "i-tiny"}, "model_flavour 'i-tiny' is not one of"),
], ids=["no-default-flavour", "no-family", "unknown-flavour"])
def test_no_toy_model_where_the_model_cannot_be_derived(drop, keep, words, tmp_path):
    """deepfloyd has no default flavour (SimpleTuner refuses it too, models/common.py:1216-1220)."""
    raw = {k: v for k, v in _raw(DATA / "deepfloyd-if-i-medium.peft-lora.json").items() if k not in drop} | keep
    if "model_flavour" in drop or keep:
        raw.pop("model_flavour", None) if not keep else None
    if drop == ("pretrained_model_name_or_path",) and not keep:
        raw.pop("model_flavour")
    source = tmp_path / "config.json"
    source.write_text(json.dumps(raw))
    with pytest.raises(ImportRefused, match="set pretrained_model_name_or_path") as err:
        import_files([source])
    assert words in str(err.value)


@pytest.mark.parametrize("order", ["simpletuner-first", "yaml-first"])
def test_a_simpletuner_config_with_its_deepspeed_accelerate_yaml_imports(order):
    """Item 7: clipping is decided once both files are read: under DeepSpeed SimpleTuner leaves it
    to the engine (norm; trainer.py:7206-7208) also where the file says 'value', and its DeepSpeed
    optimizer takes adam_weight_decay (trainer.py:4139)."""
    files = [DATA / "flux-full.json", DATA / "deepspeed-accelerate.yaml"]
    imp = import_files(files if order == "simpletuner-first" else files[::-1])
    result = compile_text(to_toml(imp), path=DATA / "settings.toml")
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    t = result.settings.training
    assert _raw(DATA / "flux-full.json")["grad_clip_method"] == "value"
    assert t.clip_method == "norm" and result.plan.strategy == "zero1"
    assert t.weight_decay == ST_DEFAULT["adam_weight_decay"][0]
    assert t.gradient_accumulation_steps == 4  # the YAML's, SimpleTuner's file leaves it unset


@pytest.mark.parametrize("key, value, outcome", [
    ("checkpoint_epoch_interval", 2, "carried"),  # saves per epoch: checkpoint.every_epochs (trainer.py:5611-5615)
    ("lr_scale", True, "named"),
    ("base_model_precision", "fp8-torchao", "carried"),  # model.base_precision; tuner run trains it not
    ("mixed_precision", "fp8", "refused"),
    ("use_dora", True, "refused"),
    ("train_text_encoder", True, "refused"),
    ("lr_scheduler", "sine", "refused"),
    ("model_type", "embedding", "refused"),
    ("layer_freeze_strategy", "bitfit", "named"),  # partial freezing of the text encoder
    ("optimizer_config", "weight_decay=0.05,eps=1e-7", "carried"),  # weight decay carried, eps named
])
def test_a_key_that_changes_what_is_trained_is_carried_named_or_refused(key, value, outcome, tmp_path):
    """Item 3: never the catch-all list."""
    raw = _raw(DATA / "flux.peft-lora.json") | {key: value}
    source = tmp_path / "config.json"
    source.write_text(json.dumps({f"--{k}": v for k, v in raw.items()}))
    if outcome == "refused":
        with pytest.raises(ImportRefused, match=f"{key} = {value!r}"):
            import_files([source])
        return
    imp = import_files([source])
    assert key not in imp.not_distributed.get("config.json", {})
    result = compile_text(to_toml(imp), path=tmp_path / "settings.toml")
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    if outcome == "named":
        assert any(r.startswith(f"config.json: {key} = {value!r}") for r in imp.remarks)
    elif key == "optimizer_config":
        assert result.settings.training.weight_decay == 0.05
        assert any("optimizer_config 'eps=1e-7'" in r for r in imp.remarks)
    elif key == "checkpoint_epoch_interval":
        assert (result.settings.checkpoint.every_epochs, result.settings.checkpoint.every_steps) == (2, 10)
    else:
        assert result.settings.model.base_precision == value
        assert any(r.startswith(f"config.json: base_model_precision = {value!r}") for r in imp.remarks)


@pytest.mark.parametrize("order", ["simpletuner-first", "yaml-first"])
def test_context_parallel_is_standalone_only_without_the_yamls_fsdp(order, tmp_path):
    """CP without FSDP is SimpleTuner's standalone CP; an FSDP2 accelerate YAML given beside the
    file, before or after it, makes it accelerate's CP under FSDP2 (decided once both are read)."""
    yaml_file = tmp_path / "fsdp.yaml"
    yaml_file.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nnum_processes: 2\n"
                         "fsdp_config:\n  fsdp_version: 2\n")
    files = [DATA / "webui-config.json", yaml_file]
    imp = import_files(files if order == "simpletuner-first" else files[::-1])
    result = compile_text(to_toml(imp), path=tmp_path / "settings.toml")
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    assert result.plan.strategy == "fsdp2" and not result.settings.context_parallel.standalone
    assert result.settings.context_parallel.size == 2


def test_a_polynomial_schedule_ending_above_its_start_is_refused_at_compile(tmp_path):
    """Unset, SimpleTuner's learning_rate and lr_end are both 4e-7: its polynomial schedule (and
    transformers') refuses that at the first step; the compile says so, naming training.lr_end."""
    source = tmp_path / "config.toml"
    source.write_text((DATA / "fsdp2-full.toml").read_text().replace('"--learning_rate" = 1e-4', ""))
    result = compile_text(to_toml(import_files([source])), path=tmp_path / "settings.toml")
    assert [d.key for d in result.diagnostics.errors] == ["training.lr_end"]
