"""LoRA targets as people write them — "all-linear" (PEFT's own), module lists, the family
default — and QLoRA (model.base_precision = "nf4-bnb", axolotl's load_in_4bit) imported, and
refused where bitsandbytes cannot run: at compile
on a CPU target, before any rank where bitsandbytes is missing, naming the key and the fix.
In-process except the one refused `tuner run` (no rank starts)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tuner.compiler.compile import compile_text
from tuner.compiler.diagnostics import EXIT_USAGE
from tuner.compiler.formats.importer import import_files
from tuner.compiler.keys.settings import Settings
from tuner.runtime.families.base import FamilyContext, FamilyError
from tuner.runtime.families.lora import quantization_kwargs

from tests.conftest import EXAMPLES, REPO, run_tuner


def _family(tmp_path: Path, family: str, path: str, **model):
    from tuner.runtime.families import get_family

    s = Settings.from_dict({"model": {"family": family, "path": path, "type": "lora", **model}})
    return get_family(family)(FamilyContext(settings=s, base_dir=tmp_path))


def _lora_parents(model) -> set[str]:
    """Last name part of every module that got a LoRA adapter."""
    return {n[: -len(".lora_A")].rsplit(".", 1)[-1] for n, _ in model.named_modules() if n.endswith(".lora_A")}


def test_all_linear_on_a_causal_lm_is_peft_s_every_linear_but_the_head(tmp_path):
    fam = _family(tmp_path, "causal_lm", "builtin", lora_target_modules=["all-linear"])
    model = fam.prepare_model(fam.build_model())
    assert _lora_parents(model) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert all("lm_head" not in n for n, p in model.named_parameters() if p.requires_grad)


def test_family_default_and_a_module_list(tmp_path):
    fam = _family(tmp_path, "causal_lm", "builtin")
    assert _lora_parents(fam.prepare_model(fam.build_model())) == {"q_proj", "v_proj"}
    fam = _family(tmp_path, "causal_lm", "builtin", lora_target_modules=["o_proj", "down_proj"])
    assert _lora_parents(fam.prepare_model(fam.build_model())) == {"o_proj", "down_proj"}


def test_all_linear_on_a_diffusers_denoiser_adapts_every_linear_layer(tmp_path):
    import torch

    fam = _family(tmp_path, "diffusion", "builtin:tiny-unet", lora_target_modules=["all-linear"])
    base = fam.build_model()
    linears = {n for n, m in base.named_modules() if isinstance(m, torch.nn.Linear)}
    model = fam.prepare_model(base)
    adapted = {n[: -len(".lora_A")].removeprefix("base_model.model.") for n, _ in model.named_modules()
               if n.endswith(".lora_A")}
    assert adapted == linears and {"to_q", "to_out.0"} <= {".".join(n.split(".")[-2:]) if n.endswith(".0")
                                                          else n.split(".")[-1] for n in adapted}
    assert not any(isinstance(m, torch.nn.Conv2d) and hasattr(m, "lora_A") for m in model.modules())
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


def test_a_target_that_matches_nothing_names_the_key_and_the_layers(tmp_path):
    fam = _family(tmp_path, "causal_lm", "builtin", lora_target_modules=["query_key_value"])
    with pytest.raises(FamilyError, match=r"model\.lora_target_modules = \['query_key_value'\] matches no module.*"
                                          r"all-linear.*q_proj"):
        fam.prepare_model(fam.build_model())


def _errors(text: str) -> list[str]:
    result = compile_text(text, host_facts=False)
    return [f"{d.key}: {d.message} / {d.fix}" for d in result.diagnostics.errors]


def test_compile_refuses_qlora_on_cpu_in_full_or_on_a_builtin_and_all_linear_mixed():
    errs = _errors('[model]\npath = "builtin"\nbase_precision = "nf4-bnb"\nlora_target_modules = "all-linear, q_proj"\n'
                   '[hardware]\nplatform = "cpu"\n')
    text = "\n".join(errs)
    assert "model.base_precision: 4-bit loading (bitsandbytes) needs CUDA GPUs; the target platform is cpu" in text
    assert "model.base_precision: a 4-bit base model cannot be trained in full" in text
    assert "model.base_precision: a built-in model is built, not loaded" in text
    assert "model.lora_target_modules: \"all-linear\" already names every linear layer" in text
    assert not _errors('[model]\ntype = "lora"\nlora_target_modules = "all-linear"\n[hardware]\nplatform = "cpu"\n')


def test_qlora_without_bitsandbytes_is_refused_before_any_rank(tmp_path):
    """Compiled for CUDA elsewhere, run here: `tuner run` names the key and the install."""
    (tmp_path / "model").mkdir()
    shutil.copy(EXAMPLES / "fsdp2.toml", tmp_path / "settings.toml")
    c = run_tuner("compile", str(tmp_path / "settings.toml"), "--out", str(tmp_path / "build"), "-q",
                  "--set", "hardware.platform=cuda", "--set", "model.type=lora", "--set", "model.path=model",
                  "--set", "model.base_precision=nf4-bnb", "--set", "training.mixed_precision=bf16")
    assert c.returncode == 0, c.stderr
    code = ("import sys; sys.modules['bitsandbytes'] = None\n"
            f"from tuner.commands.cli import main; sys.exit(main(['run', {str(tmp_path / 'build')!r}]))")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == EXIT_USAGE, p.stderr
    assert "model.base_precision = \"nf4-bnb\" (QLoRA) needs bitsandbytes, which is not installed: pip install bitsandbytes" \
        in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_the_rank_refuses_4bit_without_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA machine may load 4-bit")
    with pytest.raises(FamilyError, match="model.base_precision = \"nf4-bnb\" needs CUDA"):
        quantization_kwargs(Settings.from_dict({"model": {"base_precision": "nf4-bnb"}}).model)
    assert quantization_kwargs(Settings().model) == {}


def test_axolotl_load_in_4bit_with_an_adapter_imports_as_nf4_bnb_and_compiles_for_cuda():
    """One key for the base's precision: axolotl's QLoRA file lands on model.base_precision and
    the compile's QLoRA rules accept it (CUDA target, a model to load, LoRA)."""
    qlora = REPO / "tests/compiler/data/peer2/axolotl-ai-cloud__axolotl/examples/qwen2/qlora-fsdp.yaml"
    imported = import_files([qlora])
    assert imported.values["model.base_precision"] == "nf4-bnb"
    assert "load_in_4bit" not in imported.not_distributed.get(qlora.name, {})
    plain = REPO / "tests/compiler/data/peer2/axolotl-ai-cloud__axolotl/examples/qwen2/adamw-pretrain-fsdp2.yaml"
    assert "model.base_precision" not in import_files([plain]).values  # load_in_4bit: false
