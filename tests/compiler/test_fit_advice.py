"""Issue 37 item 4: the "does not fit" advice names activation checkpointing first where it
is the cheapest fix, and a model path with nothing known about it says so (a mistyped
folder: a warning with the did-you-mean; a Hub id: a note; an unknown built-in: an error),
so that the memory warning never disappears silently with a typo."""

from __future__ import annotations

import json

import pytest
from tuner.compiler.compile import compile_text
from tuner.compiler.memory.estimate import for_result
from tuner.tui.estimate_view import proposal

LLAMA2_7B = {  # Llama-2-7B's config.json (shapes only), as tests/tui/test_wizard_behaviours.py has it
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "torch_dtype": "float16",
    "hidden_act": "silu", "rope_theta": 10000.0,
}

GIB = 1024**3


def _settings(path: str, strategy: str, checkpointing: bool = False) -> str:
    sharding = "[fsdp]\nenabled = true\nversion = 2\n" if strategy == "fsdp2" else ""
    return (f'[model]\npath = "{path}"\n[hardware]\nplatform = "cuda"\nnum_processes = 8\ngpu_memory_gib = 80\n'
            '[data]\nseq_len = 4096\n[training]\nmicro_batch_size = 8\nmixed_precision = "bf16"\n'
            f"gradient_checkpointing = {str(checkpointing).lower()}\n{sharding}")


@pytest.fixture
def project(tmp_path):
    (tmp_path / "llama-2-7b").mkdir()
    (tmp_path / "llama-2-7b" / "config.json").write_text(json.dumps(LLAMA2_7B))
    return tmp_path


def _compile(project, text):
    return compile_text(text, path=project / "settings.toml")


def _warnings(result, key):
    return [d for d in result.diagnostics.items if d.severity == "warning" and d.key == key]


@pytest.mark.parametrize("strategy, fits_as", [("fsdp2", "FSDP2"), ("ddp", "ZeRO-1")])
def test_activation_checkpointing_is_named_first_when_it_makes_the_plan_fit(project, strategy, fits_as):
    result = _compile(project, _settings("llama-2-7b", strategy))
    est = for_result(result)
    assert est.chosen.fits_gpu is False and est.recommendation is None  # nothing fits as configured
    assert est.recommendation_line.startswith(f"{fits_as} with training.gradient_checkpointing = true")
    assert est.advice[0].startswith("activation checkpointing (training.gradient_checkpointing = true) takes")
    (warning,) = _warnings(result, "hardware.gpu_memory_gib")
    assert "training.gradient_checkpointing = true" in warning.fix
    # and it is true: with checkpointing on, the estimate fits
    on = for_result(_compile(project, _settings("llama-2-7b", strategy, checkpointing=True)))
    assert est.with_checkpointing.per_gpu < 72 * GIB
    if strategy == "fsdp2":
        assert on.chosen.fits_gpu is True and on.chosen.per_gpu == est.with_checkpointing.per_gpu
        print(f"7B FSDP2 8x80: {est.chosen.per_gpu / GIB:.1f} GiB -> {on.chosen.per_gpu / GIB:.1f} GiB per GPU")


def test_checkpointing_already_on_is_not_the_advice(project):
    text = _settings("llama-2-7b", "ddp", checkpointing=True).replace("seq_len = 4096", "seq_len = 65536")
    est = for_result(_compile(project, text))
    assert est.chosen.fits_gpu is False
    assert "gradient_checkpointing = true" not in est.recommendation_line


def test_the_quick_start_proposes_checkpointing_when_nothing_fits_without_it(project):
    est = for_result(_compile(project, _settings("llama-2-7b", "fsdp2")))
    picked = proposal(est)
    assert picked["edits"]["training.gradient_checkpointing"] is True
    assert "activation checkpointing" in picked["label"] and picked["why"].startswith("fits with activation")


def test_a_mistyped_model_folder_is_a_warning_with_the_did_you_mean(project):
    typo = _compile(project, _settings("llama-2-7", "ddp"))
    (warning,) = _warnings(typo, "model.path")
    assert "'llama-2-7' is not a folder on this machine" in warning.message
    assert "whether ddp fits 80.00 GiB per GPU was not checked" in warning.message
    assert warning.fix == "did you mean llama-2-7b?"
    # the DDP warning the right path gives does not vanish without a word: a warning stays
    right = _compile(project, _settings("llama-2-7b", "ddp"))
    assert _warnings(right, "hardware.gpu_memory_gib") and _warnings(typo, "model.path")


def test_a_hub_id_is_a_note_and_an_unknown_builtin_an_error(project):
    hub = _compile(project, _settings("meta-llama/Llama-2-7b-hf", "ddp"))
    (note,) = [d for d in hub.diagnostics.items if d.key == "model.path"]
    assert note.severity == "note" and "Hugging Face Hub id" in note.message
    builtin = _compile(project, _settings("builtin:tiny-lama", "ddp"))
    (error,) = [d for d in builtin.diagnostics.errors if d.key == "model.path"]
    assert "unknown built-in model 'tiny-lama'" in error.message and error.fix == "did you mean builtin:tiny-llama?"


def test_a_known_model_has_no_path_diagnostic(project):
    for path in ("llama-2-7b", "builtin:tiny-llama"):
        assert not [d for d in _compile(project, _settings(path, "fsdp2")).diagnostics.items if d.key == "model.path"]
