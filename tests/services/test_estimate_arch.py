"""The torch-free parameter and LoRA counts against transformers and PEFT on the meta device.

Configs are the published config.json values (only the fields those files carry, so the
class defaults apply as they do for a real checkpoint), with fewer layers for the meta
build; the full-size analytic count is checked against the published total, and the
per-layer step against a second meta build (the formula scales).
"""

from __future__ import annotations

import json

import pytest
from tuner.compiler.compile import compile_file
from tuner.compiler.memory.estimate import estimate
from tuner.compiler.memory.lora import decoder_lora
from tuner.compiler.memory.model import histogram
from tuner.compiler.memory.shapes import CLASS_DEFAULTS, DENSE, MOE, analytic_count, architecture
from tuner.runtime.blocks import build_model, detect

from tests.services.conftest import write_model

#: Published config.json shape fields (Hugging Face hub), and the published parameter totals.
PUBLISHED = {
    "gemma-2b": ({"model_type": "gemma", "architectures": ["GemmaForCausalLM"], "hidden_size": 2048,
                  "intermediate_size": 16384, "num_attention_heads": 8, "num_hidden_layers": 18,
                  "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 256000}, 2_506_172_416),
    "gemma-2-9b": ({"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "hidden_size": 3584,
                    "intermediate_size": 14336, "num_attention_heads": 16, "num_hidden_layers": 42,
                    "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000}, 9_241_705_984),
    "qwen2-0.5b-tied": ({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 896,
                         "intermediate_size": 4864, "num_attention_heads": 14, "num_hidden_layers": 24,
                         "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True}, 494_032_768),
    "qwen2-7b-untied": ({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584,
                         "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28,
                         "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False},
                        7_615_616_512),
    "mixtral-8x7b": ({"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 4096,
                      "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
                      "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
                      "num_experts_per_tok": 2, "tie_word_embeddings": False}, 46_702_792_704),
    "qwen1.5-moe-a2.7b": ({"model_type": "qwen2_moe", "architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 2048,
                           "intermediate_size": 5632, "moe_intermediate_size": 1408,
                           "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
                           "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 24,
                           "vocab_size": 151936, "decoder_sparse_step": 1, "tie_word_embeddings": False},
                          14_315_784_192),
    "qwen3-30b-a3b": ({"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048,
                       "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
                       "num_experts_per_tok": 8, "num_attention_heads": 32, "num_key_value_heads": 4,
                       "head_dim": 128, "num_hidden_layers": 48, "vocab_size": 151936, "decoder_sparse_step": 1,
                       "mlp_only_layers": [], "tie_word_embeddings": False}, 30_532_122_624),
    "deepseek-v3": ({"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
                     "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
                     "n_shared_experts": 1, "first_k_dense_replace": 3, "num_attention_heads": 128,
                     "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                     "qk_nope_head_dim": 128, "v_head_dim": 128, "num_hidden_layers": 61, "vocab_size": 129280,
                     "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "moe_layer_freq": 1,
                     "tie_word_embeddings": False}, 671_026_404_352),
}
#: Layers in the meta builds: enough for a dense and a sparse layer where the model has both.
META_LAYERS = {"deepseek-v3": 4}


def _meta(tmp_path, name: str, config: dict):
    r = detect(str(write_model(tmp_path, name, config)), use_cache=False)
    return r.total_parameters, {int(k): v for k, v in r.param_numels.items()}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_analytic_count_equals_meta_build(tmp_path, name):
    config, published = PUBLISHED[name]
    full = analytic_count(config)
    assert full is not None and full.uncertain == "", name
    assert sum(full.sizes) == published  # the full-size count is the published total
    layers = META_LAYERS.get(name, 2)
    small = {**config, "num_hidden_layers": layers}
    meta_total, meta_hist = _meta(tmp_path, name, small)
    counted = analytic_count(small)
    assert sum(counted.sizes) == meta_total
    assert histogram(counted.sizes) == meta_hist  # tensor by tensor (ZeRO-3 persistence needs it)
    # One more layer: the analytic step per layer is what the model adds, so the count scales.
    meta_more, _ = _meta(tmp_path, name + "-more", {**config, "num_hidden_layers": layers + 1})
    step = meta_more - meta_total
    assert sum(full.sizes) == meta_total + (config["num_hidden_layers"] - layers) * step


def test_gemma_counts_are_not_the_untied_llama_figures():
    """The issue's figures: read as Llama-likes, Gemma-2-9B was 10.16B and Gemma-2B 3.03B."""
    g2 = sum(analytic_count(PUBLISHED["gemma-2-9b"][0]).sizes)
    g1 = sum(analytic_count(PUBLISHED["gemma-2b"][0]).sizes)
    assert round(g2 / 1e9, 2) == 9.24 and round(g1 / 1e9, 2) == 2.51


MINIMAL_MOE = {"mixtral": {"num_local_experts": 4}, "qwen2_moe": {"num_experts": 4}, "qwen3_moe": {"num_experts": 4},
               "deepseek_v2": {"n_routed_experts": 4, "q_lora_rank": None, "n_group": 1},
               "deepseek_v3": {"n_routed_experts": 4, "n_group": 2, "topk_group": 1}}


def test_class_defaults_table_matches_transformers():
    from transformers import AutoConfig

    for mt, fields in CLASS_DEFAULTS.items():
        cfg = AutoConfig.for_model(mt)
        for key, value in fields.items():
            assert getattr(cfg, key) == value, (mt, key)


@pytest.mark.parametrize("bias", [False, True], ids=["plain", "biases"])
@pytest.mark.parametrize("mt", DENSE + MOE)
def test_class_defaults_apply_when_config_json_omits_them(tmp_path, mt, bias):
    """A config.json without tie_word_embeddings / head_dim fields: tuner's count equals the
    meta build, so its defaults are transformers' class defaults; with every bias switch on
    (attention_bias, mlp_bias, qkv_bias) too."""
    from transformers import AutoConfig

    config = {"model_type": mt, "architectures": ["X"], "hidden_size": 64, "intermediate_size": 96,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
              **MINIMAL_MOE.get(mt, {})}
    if bias:
        config.update(attention_bias=True, mlp_bias=True, qkv_bias=True)
    assert bool(AutoConfig.for_model(mt).tie_word_embeddings) == architecture(config).tied
    meta_total, _ = _meta(tmp_path, mt, config)
    assert sum(analytic_count(config).sizes) == meta_total


def test_unknown_architecture_is_flagged_not_silently_counted(tmp_path):
    config = {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
              "pad_token_id": 0}
    counted = analytic_count(config)
    assert counted is not None and "phi3" in counted.uncertain
    model = write_model(tmp_path, "phi", config)
    path = tmp_path / "settings.toml"
    path.write_text(f'[model]\npath = "{model.name}"\n[hardware]\nplatform = "cpu"\nnum_processes = 1\n')
    result = compile_file(path)
    notes = [d for d in result.diagnostics.items if d.key == "model.path"]
    assert notes and "uncertain" in notes[0].message and f"tuner blocks {model.name}" in notes[0].message
    est = estimate(result.settings, result.plan, base_dir=tmp_path)
    assert est.model.uncertain and "warning: parameter count uncertain" in est.table()
    detect(str(model))  # `tuner blocks`: the exact count replaces the guess
    est = estimate(result.settings, result.plan, base_dir=tmp_path)
    assert est.model.source == "detection" and not est.model.uncertain


# --- LoRA against PEFT -------------------------------------------------------------------------

SMALL = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 100, "tie_word_embeddings": False}
LORA_MODELS = {
    "llama": {"model_type": "llama", **SMALL},
    "mixtral": {"model_type": "mixtral", **SMALL, "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {"model_type": "qwen2_moe", **SMALL, "num_experts": 4, "moe_intermediate_size": 32,
                  "shared_expert_intermediate_size": 48, "num_experts_per_tok": 2, "mlp_only_layers": [2]},
    "qwen3_moe": {"model_type": "qwen3_moe", **SMALL, "head_dim": 16, "num_experts": 4, "moe_intermediate_size": 32,
                  "num_experts_per_tok": 2, "mlp_only_layers": [0]},
    "deepseek_v3": {"model_type": "deepseek_v3", **SMALL, "num_key_value_heads": 4, "n_routed_experts": 4,
                    "n_shared_experts": 1, "moe_intermediate_size": 32, "first_k_dense_replace": 1,
                    "q_lora_rank": 24, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16,
                    "v_head_dim": 16, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1},
}
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TARGETS = {"attention": ["q_proj", "v_proj"], "all": ALL, "mixtral-v4-names": ["q_proj", "w1", "w2", "w3"],
           "mla": ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "down_proj"]}


LORA_CASES = ([(m, "all") for m in sorted(LORA_MODELS)] + [(m, "attention") for m in sorted(LORA_MODELS) if m != "deepseek_v3"]
              + [("mixtral", "mixtral-v4-names"), ("deepseek_v3", "mla")])


@pytest.mark.parametrize("model,targets", LORA_CASES)
def test_lora_count_equals_peft_on_the_meta_model(tmp_path, model, targets):
    import warnings

    from peft import LoraConfig, get_peft_model

    config = LORA_MODELS[model]
    wanted = TARGETS[targets]
    folder = write_model(tmp_path, model, {**config, "architectures": ["X"]})
    module = build_model(str(folder), family="causal_lm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peft_model = get_peft_model(module, LoraConfig(r=4, target_modules=list(wanted), task_type="CAUSAL_LM"))
    expected = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert decoder_lora(architecture(config), list(wanted), 4) == expected


def test_lora_estimate_reads_the_moe_experts(tmp_path):
    """Through the settings: Qwen3-30B-A3B with every projection adapted (rank 16)."""
    model = write_model(tmp_path, "qwen3moe", PUBLISHED["qwen3-30b-a3b"][0])
    path = tmp_path / "settings.toml"
    path.write_text(f'[model]\npath = "{model.name}"\ntype = "lora"\nlora_rank = 16\n'
                    f"lora_target_modules = {json.dumps(ALL)}\n"
                    '[hardware]\nplatform = "cuda"\nnum_processes = 8\n[fsdp]\nenabled = true\nversion = 2\n')
    result = compile_file(path)
    est = estimate(result.settings, result.plan, base_dir=tmp_path)
    a = architecture(PUBLISHED["qwen3-30b-a3b"][0])
    h, e, i, r = 2048, 128, 768, 16
    experts = 48 * (2 * r * e * (h + 2 * i) + r * e * (i + h))  # gate_up at rank 2r, down at r
    attention = 48 * r * ((h + 32 * 128) * 2 + (h + 4 * 128) * 2)
    assert decoder_lora(a, ALL, r) == experts + attention
    assert any(f"{(experts + attention) / 1e6:.2f}M" in n for n in est.notes)


#: PEFT's counts on the meta models above under the release that is not installed here:
#: get_peft_model(..., LoraConfig(r=4, target_modules=TARGETS[t])) measured with peft 0.21.2
#: and 0.22.0 on transformers 5.23 (0.22 adapts Qwen2-MoE's experts, and keeps the dense and
#: shared-expert MLPs as module targets beside the fused experts).
PEFT_MEASURED = {("deepseek_v3", "all"): (12800, 17024), ("qwen2_moe", "all"): (9984, 21248),
                 ("qwen3_moe", "all"): (16640, 18560), ("deepseek_v3", "mla"): (9888, 11296)}


@pytest.mark.parametrize("model,targets", sorted(PEFT_MEASURED))
def test_lora_count_follows_the_peft_release(model, targets):
    config = LORA_MODELS[model]
    old, new = PEFT_MEASURED[model, targets]
    assert decoder_lora(architecture(config), TARGETS[targets], 4, peft=(0, 21)) == old
    assert decoder_lora(architecture(config), TARGETS[targets], 4, peft=(0, 22)) == new
