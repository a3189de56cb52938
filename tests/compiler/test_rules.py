"""Cross-field rules, with the seeds' exact messages, and forgiving spellings."""

from __future__ import annotations

import json

import pytest
from tuner.compiler.compile import compile_text


def compile_(text: str, *overrides: str, tmp_path=None):
    return compile_text(text, overrides, path=(tmp_path / "settings.toml") if tmp_path else None)


def errors(result) -> list[str]:
    return [d.message for d in result.diagnostics.errors]


def messages(result, severity: str) -> list[str]:
    return [d.message for d in result.diagnostics.items if d.severity == severity]


def test_fsdp_and_deepspeed_together_is_refused_with_the_seed_message():
    r = compile_("fsdp_enable = true\n[deepspeed_config.zero_optimization]\nstage = 2\n")
    assert "FSDP and DeepSpeed cannot be enabled simultaneously." in errors(r)
    assert not r.files


@pytest.mark.parametrize("fsdp", ["", "fsdp_enable = true\nfsdp_version = 1\n"])
def test_context_parallel_requires_fsdp2(fsdp):
    r = compile_(fsdp + "platform = 'cuda'\nnum_processes = 4\ncontext_parallel_size = 2\n")
    assert "Context parallelism requires FSDP2." in errors(r)


def test_context_parallel_is_cuda_only_and_must_divide_processes():
    base = "fsdp_enable = true\nnum_processes = 6\ncontext_parallel_size = 4\n"
    r = compile_(base + "platform = 'cpu'\n")
    errs = errors(r)
    assert any("CUDA-only" in e for e in errs)
    assert any("must divide hardware.num_processes 6" in e for e in errs)


def test_context_parallel_size_one_normalises_the_rotation():
    r = compile_("context_parallel_size = 1\ncontext_parallel_comm_strategy = 'alltoall'\n")
    assert r.ok
    assert r.settings.context_parallel.comm_strategy == "allgather"
    assert "parallelism_config" not in r.accelerate_yaml
    assert any("normalised to 'allgather'" in m for m in messages(r, "note"))


def test_fsdp_v1_needs_a_gpu():
    r = compile_("fsdp_enable = true\nfsdp_version = 1\nnum_processes = 2\nplatform = 'cpu'\n")
    assert "FSDP v1 needs a GPU: torch's FSDP v1 cannot compute on CPU" in errors(r)


def test_fsdp_v1_is_deprecated_but_works():
    r = compile_("fsdp_enable = true\nfsdp_version = 1\nnum_processes = 2\nplatform = 'cuda'\n")
    assert r.ok and r.plan.strategy == "fsdp1"
    assert any("deprecated" in m for m in messages(r, "warning"))
    assert "fsdp_use_orig_params: true" in r.accelerate_yaml


@pytest.mark.parametrize("stage", [2, 3])
def test_lora_compiles_with_deepspeed_and_with_fsdp2(stage):
    """LoRA under ZeRO-2/3 trains and saves its adapters (tests/runtime/test_lora_deepspeed.py):
    the compile no longer refuses it."""
    r = compile_(f"model_type = 'lora'\nnum_processes = 2\n[deepspeed]\nenabled = true\nzero_stage = {stage}\n")
    assert r.ok and not any("LoRA" in e for e in errors(r)), errors(r)
    assert r.plan.strategy == f"zero{stage}"
    assert compile_("model_type = 'lora'\nfsdp_enable = true\nnum_processes = 2\n").ok


@pytest.mark.parametrize("platform,name", [("mps", "macOS (MPS)"), ("rocm", "ROCm")])
def test_deepspeed_refused_on_mps_and_rocm(platform, name):
    r = compile_(f"platform = '{platform}'\n[deepspeed]\nenabled = true\n")
    assert f"DeepSpeed is not available on {name} hosts." in errors(r)


def test_deepspeed_batch_arithmetic_is_resolved():
    r = compile_("num_processes = 4\ntrain_batch_size = 3\ngradient_accumulation_steps = 2\n"
                 "[deepspeed]\nenabled = true\n[deepspeed.config]\ntrain_batch_size = 'auto'\n")
    assert r.ok
    ds = json.loads(r.deepspeed_json)
    # "auto" stays for accelerate to fill; the settings' factors are written and checked.
    assert (ds["train_batch_size"], ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == ("auto", 3, 2)
    assert r.plan.global_batch_size == 24


def test_deepspeed_batch_mismatch_names_every_factor():
    r = compile_("num_processes = 2\n[deepspeed_config]\ntrain_batch_size = 8\n"
                 "train_micro_batch_size_per_gpu = 2\ngradient_accumulation_steps = 4\n")
    (err,) = [d for d in r.diagnostics.errors if "train_batch_size" in d.key]
    assert "train_micro_batch_size_per_gpu 2" in err.message and "gradient_accumulation_steps 4" in err.message
    assert "world size 2 = 16" in err.message


def test_unresolvable_auto_is_refused():
    """At the top level DeepSpeed reads "auto" as a value (inside its config models it drops
    it: tests/compiler/test_fidelity.py)."""
    r = compile_("[deepspeed_config]\nsteps_per_print = 'auto'\nzero_optimization = { stage = 2 }\n")
    assert any("'auto' here would reach DeepSpeed unresolved" in e for e in errors(r))


@pytest.mark.parametrize("name,expected", [("adamw", "AdamW"), ("ADAM", "Adam"), ("lion", "Lion"), ("lamb", "Lamb")])
def test_optimizer_names_are_normalised(name, expected):
    r = compile_(f"[deepspeed]\nenabled = true\noptimizer = '{name}'\n")
    assert r.ok
    assert json.loads(r.deepspeed_json)["optimizer"]["type"] == expected


@pytest.mark.parametrize("name", ["cpuadam", "fusedadam", "FusedAdam"])
def test_implementation_names_become_adamw_with_a_warning(name):
    r = compile_(f"[deepspeed_config.optimizer]\ntype = '{name}'\n")
    assert r.ok
    assert json.loads(r.deepspeed_json)["optimizer"]["type"] == "AdamW"
    assert any("using 'AdamW'" in m for m in messages(r, "warning"))


def test_unknown_optimizer_is_refused_with_the_supported_list():
    r = compile_("[deepspeed]\nenabled = true\noptimizer = 'adafactor'\n")
    (err,) = [d for d in r.diagnostics.errors if d.key == "deepspeed.optimizer"]
    assert "adafactor" in err.message
    for name in ("AdamW", "Adam", "Adagrad", "Lamb", "OneBitAdam", "Lion", "Muon"):
        assert name in err.fix


def test_deepspeed_json_has_no_optimizer_or_scheduler_unless_asked():
    r = compile_("learning_rate = 2e-4\nwarmup_steps = 7\n[deepspeed]\nenabled = true\n")
    ds = json.loads(r.deepspeed_json)
    assert "optimizer" not in ds and "scheduler" not in ds  # tuner run builds them in code
    # nothing that changes behaviour is added: no clipping, no pin_memory, no print interval
    assert set(ds) == {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                       "zero_optimization"}
    asked = compile_("platform = 'cuda'\nlr_scheduler = 'cosine'\n[deepspeed]\nenabled = true\noptimizer = 'AdamW'\n"
                     "scheduler = 'WarmupDecayLR'\n")
    ds = json.loads(asked.deepspeed_json)
    assert ds["optimizer"] == {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}}
    assert ds["scheduler"] == {"type": "WarmupDecayLR", "params": dict.fromkeys(
        ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps"), "auto")}
    (wins,) = [d for d in asked.diagnostics.items if d.key == "deepspeed.config.scheduler"]
    assert wins.severity == "warning" and "WarmupDecayLR" in wins.message and "'cosine'" in wins.message


def test_zero_offload_adds_no_optimizer_block():
    """accelerate swaps a script's torch AdamW/Adam for DeepSpeed's CPU Adam when the JSON
    offloads the optimizer and names none; a block would make that script fail (issue 23 item 1)."""
    r = compile_("platform = 'cuda'\n[deepspeed]\nenabled = true\noffload_optimizer = 'cpu'\n")
    ds = json.loads(r.deepspeed_json)
    assert "optimizer" not in ds and "scheduler" not in ds
    assert ds["zero_optimization"]["offload_optimizer"] == {"device": "cpu"}
    sgd = compile_("optimizer = 'sgd'\n[deepspeed]\nenabled = true\noffload_optimizer = 'cpu'\n")
    assert any("ZeRO-Offload" in e for e in errors(sgd))


def test_auto_and_unset_stay_accelerates_and_deepspeeds():
    r = compile_("mixed_precision = 'bf16'\n[deepspeed_config]\ngradient_clipping = 'auto'\n"
                 "bf16 = { enabled = 'auto' }\n"
                 "zero_optimization = { stage = 3, reduce_bucket_size = 'auto', stage3_prefetch_bucket_size = 'auto' }\n"
                 "[deepspeed_config.scheduler]\ntype = 'WarmupLR'\nparams = { warmup_num_steps = 'auto' }\n")
    assert r.ok, errors(r)
    ds = json.loads(r.deepspeed_json)
    assert ds["gradient_clipping"] == "auto" and ds["bf16"] == {"enabled": "auto"}
    assert ds["zero_optimization"]["reduce_bucket_size"] == "auto"
    assert ds["zero_optimization"]["stage3_prefetch_bucket_size"] == "auto"
    assert ds["scheduler"]["params"] == {"warmup_num_steps": "auto"}  # no warmup_type added
    assert ds["train_micro_batch_size_per_gpu"] == "auto"  # no batch keys: accelerate fills from the loader
    assert "stage3_gather_16bit_weights_on_model_save" not in ds["zero_optimization"]
    bare = compile_("[deepspeed_config]\ntrain_micro_batch_size_per_gpu = 2\n")
    ds = json.loads(bare.deepspeed_json)
    # stage 0 (written: accelerate needs the block), no clipping, fp32: DeepSpeed's defaults
    assert ds == {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 0}}
    assert bare.plan.strategy == "zero0"


def test_nvme_path_must_exist(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_PLATFORM", "cuda")  # compiled on a training machine (a CUDA one, as the target)
    r = compile_("platform='cuda'\n[deepspeed]\nenabled = true\nzero_stage = 3\noffload_param = 'nvme'\n"
                 f"nvme_path = '{tmp_path / 'missing'}'\n")
    (err,) = [d for d in r.diagnostics.errors if d.key == "deepspeed.nvme_path"]
    assert "does not exist" in err.message and "mkdir -p" in err.fix


def test_nvme_path_off_the_training_machine_is_a_note_for_tuner_check(tmp_path, monkeypatch):
    """Issue 37 item 5: compiled on a CPU laptop / login node for CUDA machines, a cluster
    path that is not here is a note, not an error; on the target itself it stays an error."""
    monkeypatch.setenv("TUNER_PLATFORM", "cpu")
    text = ("platform='cuda'\n[deepspeed]\nenabled = true\nzero_stage = 3\noffload_param = 'nvme'\n"
            f"nvme_path = '{tmp_path / 'scratch' / 'nvme'}'\n")
    r = compile_(text)
    assert r.ok, errors(r)
    (note,) = {d.message: d for d in r.diagnostics.items if d.key == "deepspeed.nvme_path"}.values()
    assert note.severity == "note" and "this machine is cpu, the target cuda" in note.message
    assert "tuner check" in note.fix
    monkeypatch.setenv("TUNER_PLATFORM", "cuda")
    assert any("does not exist" in e for e in errors(compile_(text)))


def test_nvme_path_must_be_a_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_PLATFORM", "cuda")
    f = tmp_path / "file"
    f.write_text("x")
    r = compile_(f"platform='cuda'\n[deepspeed]\nenabled = true\nzero_stage = 3\noffload_param = 'nvme'\nnvme_path = '{f}'\n")
    assert any("not a directory" in e for e in errors(r))


def test_nvme_needs_stage_3_and_a_path():
    r = compile_("[deepspeed]\nenabled = true\nzero_stage = 2\noffload_optimizer = 'nvme'\n")
    errs = errors(r)
    assert any("NVMe offload needs ZeRO stage 3" in e for e in errs)
    assert any("needs a directory" in e for e in errs)


def test_nvme_offload_adds_no_defaults(tmp_path):
    r = compile_("platform='cuda'\n[deepspeed]\nenabled = true\nzero_stage = 3\noffload_param = 'nvme'\n"
                 f"offload_optimizer = 'nvme'\nnvme_path = '{tmp_path}'\n")
    assert r.ok, errors(r)
    zero = json.loads(r.deepspeed_json)["zero_optimization"]
    # DeepSpeed's own defaults (buffer count, size, aio) apply: tuner adds none of them.
    assert zero["offload_param"] == {"device": "nvme", "nvme_path": str(tmp_path)}
    assert zero["offload_optimizer"] == {"device": "nvme", "nvme_path": str(tmp_path)}


def test_multi_node_needs_an_address_and_consistent_ranks():
    r = compile_("num_machines = 2\nnum_processes = 3\nmachine_rank = 2\n")
    keys = {d.key for d in r.diagnostics.errors}
    assert {"hardware.main_process_ip", "hardware.num_processes", "hardware.machine_rank"} <= keys


# --- forgiving spellings ------------------------------------------------------------

@pytest.mark.parametrize("spelling", ["2", "'2'", "'v2'", "'V2'"])
def test_fsdp_version_spellings(spelling):
    r = compile_(f"fsdp_enable = true\nfsdp_version = {spelling}\n")
    assert r.ok and r.settings.fsdp.version == 2
    if spelling != "2":
        assert any(d.key == "fsdp_version" and "normalised" in d.message for d in r.diagnostics.items)


@pytest.mark.parametrize("spelling,expected", [
    ("sharded", "sharded"), ("SHARDED_STATE_DICT", "sharded"), ("sharded_state_dict", "sharded"),
    ("FULL_STATE_DICT", "full"), ("full", "full")])
def test_state_dict_spellings(spelling, expected):
    r = compile_(f"fsdp_enable = true\nfsdp_state_dict_type = '{spelling}'\n")
    assert r.ok and r.settings.checkpoint.state_dict_type == expected


@pytest.mark.parametrize("spelling,expected,yaml_name", [
    ("transformer", "transformer", "TRANSFORMER_BASED_WRAP"),
    ("TRANSFORMER_BASED_WRAP", "transformer", "TRANSFORMER_BASED_WRAP"),
    ("transformer_based_wrap", "transformer", "TRANSFORMER_BASED_WRAP"),
    ("size", "size", "SIZE_BASED_WRAP"), ("SIZE_BASED_WRAP", "size", "SIZE_BASED_WRAP"),
    ("none", "none", "NO_WRAP"), ("no_wrap", "none", "NO_WRAP"), ("NO_WRAP", "none", "NO_WRAP"),
    ("mypkg.policies.wrap_blocks", "mypkg.policies.wrap_blocks", "NO_WRAP")])
def test_wrap_policy_spellings(spelling, expected, yaml_name):
    r = compile_(f"fsdp_enable = true\nfsdp_auto_wrap_policy = '{spelling}'\n")
    assert r.ok and r.settings.fsdp.auto_wrap_policy == expected
    assert f"fsdp_auto_wrap_policy: {yaml_name}" in r.accelerate_yaml


def test_wrap_policy_garbage_is_refused():
    r = compile_("fsdp_enable = true\nfsdp_auto_wrap_policy = 'by magic'\n")
    assert any("unknown wrap policy" in e for e in errors(r))


@pytest.mark.parametrize("value", ["'LlamaDecoderLayer, LlamaMLP'", "['LlamaDecoderLayer', 'LlamaMLP']"])
def test_wrap_classes_as_array_or_comma_string(value):
    r = compile_(f"fsdp_enable = true\nfsdp_transformer_layer_cls_to_wrap = {value}\n")
    assert r.settings.fsdp.transformer_layer_cls_to_wrap == ["LlamaDecoderLayer", "LlamaMLP"]
    assert "fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer,LlamaMLP" in r.accelerate_yaml


def test_aliases_inside_sections_and_canonical_keys_agree():
    flat = compile_("fsdp_enable = true\nfsdp_version = 2\nnum_processes = 2\n")
    sectioned = compile_("[fsdp]\nenabled = true\nversion = 2\n[hardware]\nnum_processes = 2\n")
    in_section = compile_("[fsdp]\nfsdp_enable = true\nfsdp_version = 2\n[hardware]\nnum_processes = 2\n")
    assert flat.accelerate_yaml == sectioned.accelerate_yaml == in_section.accelerate_yaml


def test_the_same_key_twice_with_different_values_is_an_error():
    r = compile_("fsdp_version = 1\n[fsdp]\nversion = 2\n")
    assert any("set twice" in e for e in errors(r))


def test_mixed_precision_is_written_quoted_and_omitted_beside_a_deepspeed_file():
    assert "mixed_precision: 'no'" in compile_("num_processes = 2\n").accelerate_yaml
    ds = compile_("mixed_precision = 'bfloat16'\n[deepspeed]\nenabled = true\n")
    assert "mixed_precision" not in ds.accelerate_yaml
    assert json.loads(ds.deepspeed_json)["bf16"] == {"enabled": True}


def test_fsdp_cpu_offload_needs_a_gpu_target():
    r = compile_("fsdp_enable = true\nfsdp_offload_params = true\nplatform = 'cpu'\n")
    assert any("FSDP CPU offload moves parameters off the GPU" in e for e in errors(r))
    assert compile_("fsdp_enable = true\nfsdp_offload_params = true\nplatform = 'cuda'\n").ok


def test_hidden_size_auto_is_refused_for_models_without_a_hidden_size():
    r = compile_("[model]\nfamily = 'diffusion'\n[deepspeed_config]\n"
                 "zero_optimization = { stage = 2, reduce_bucket_size = 'auto' }\n")
    (err,) = r.diagnostics.errors
    assert err.key == "deepspeed.config.zero_optimization.reduce_bucket_size" and "hidden_size" in err.message
