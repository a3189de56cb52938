"""The memory estimator (pure Python) and the compiler checks built on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tuner.compiler.compile import compile_file, compile_text
from tuner.compiler.memory.estimate import COMPARED, GIB, ModelSize, estimate
from tuner.compiler.read.inputs import find_model
from tuner.compiler.review import model_facts
from tuner.tui.services import estimate_table

from tests.conftest import run_tuner
from tests.services.conftest import LLAMA2_7B, write_model

P = 1000


def plan_of(text: str, tmp_path: Path | None = None):
    path = None
    if tmp_path is not None:
        path = tmp_path / "settings.toml"
        path.write_text(text)
        result = compile_file(path)
    else:
        result = compile_text(text)
    assert result.settings is not None and result.plan is not None, result.diagnostics.items
    return result


def settings(strategy: str = "", processes: int = 2, extra: str = "", platform: str = "cpu") -> str:
    blocks = {
        "ddp": "",
        "fsdp2": "[fsdp]\nenabled = true\nversion = 2\n",
        "zero2": "[deepspeed]\nenabled = true\nzero_stage = 2\n",
        "zero3": "[deepspeed]\nenabled = true\nzero_stage = 3\n",
    }
    return (f'[model]\npath = "builtin:tiny-llama"\n[hardware]\nplatform = "{platform}"\n'
            f"num_processes = {processes}\n{blocks.get(strategy, '')}{extra}")


def toy(**kw) -> ModelSize:
    return ModelSize(P, "stated", {500: 2}, 100, {}, "unknown", **kw)


def test_model_state_formulas_per_strategy():
    r = plan_of(settings("ddp"))
    est = estimate(r.settings, r.plan, model=toy())
    got = {row.name: (row.device.params, row.device.grads, row.device.optimizer, row.device.master) for row in est.rows}
    # fp32 (no mixed precision), Adam (8 bytes of state per parameter), 2 ranks.
    assert got["ddp"] == (4 * P, 4 * P, 8 * P, 0)
    assert got["fsdp2"] == (2 * P, 2 * P, 4 * P, 0)
    assert got["zero1"] == (4 * P, 4 * P, 4 * P, 2 * P)
    assert got["zero2"] == (4 * P, 2 * P, 4 * P, 2 * P)
    assert got["zero3"] == (2 * P, 2 * P, 4 * P, 2 * P)
    assert est.chosen.name == "ddp" and est.chosen.device.buffers == 4 * P  # DDP's gradient buckets


def test_deepspeed_holds_the_model_in_the_compute_dtype():
    r = plan_of(settings("zero2", extra='[training]\nmixed_precision = "bf16"\n'))
    est = estimate(r.settings, r.plan, model=toy())
    assert est.chosen.device.params == 2 * P and est.chosen.device.master == 2 * P
    assert est.row("ddp").device.params == 4 * P  # accelerate autocast keeps fp32 weights


def test_offload_moves_state_off_the_device():
    r = plan_of(settings("zero3"))
    est = estimate(r.settings, r.plan, model=toy())
    off, nvme, fsdp_off = est.row("zero3+offload"), est.row("zero3+nvme"), est.row("fsdp2+offload")
    assert off.device.model_states == 0
    assert (off.host.params, off.host.master, off.host.optimizer) == (2 * P, 2 * P, 4 * P)
    assert nvme.nvme.params == 2 * P and nvme.nvme.optimizer == 4 * P and nvme.nvme_per_host == 2 * nvme.nvme.total
    assert fsdp_off.device.model_states == 0 and fsdp_off.host.model_states == est.row("fsdp2").device.model_states
    z2 = est.row("zero2+offload")
    assert z2.device.params == 4 * P and z2.device.optimizer == 0 and z2.host.optimizer == 4 * P
    for row in est.rows:  # nothing is lost by moving it
        assert sum(row.rank_state(k) for k in ("params", "grads", "optimizer", "master")) > 0


def test_settings_offload_is_the_chosen_row(tmp_path):
    extra = '[deepspeed]\nenabled = true\nzero_stage = 3\noffload_param = "cpu"\noffload_optimizer = "cpu"\n'
    r = plan_of(settings(processes=2, extra=extra))
    est = estimate(r.settings, r.plan, model=toy())
    assert est.chosen.label == "ZeRO-3 + CPU offload" and est.chosen.device.params == 0 and est.chosen.host.params == 2 * P


def test_deepspeed_rows_count_the_optimizer_the_ranks_build():
    """A deepspeed.json without an optimizer block leaves the optimizer to the trainer, which builds
    training.optimizer (SGD: no state); a block (deepspeed.optimizer set, or a raw deepspeed.config one)
    is what DeepSpeed builds. The compile's own estimate, for_result's and a direct call agree."""
    sgd = plan_of(settings("zero2", extra='[training]\noptimizer = "sgd"\n'))
    assert "optimizer" not in json.loads(sgd.deepspeed_json)
    assert sgd.estimate.chosen.device.optimizer == 0 and sgd.estimate.row("zero3").device.optimizer == 0
    assert estimate(sgd.settings, sgd.plan, model=toy(), ds_config=sgd.deepspeed).chosen.device.optimizer == 0
    named = plan_of(settings(extra='[training]\noptimizer = "sgd"\n[deepspeed]\nenabled = true\nzero_stage = 2\n'
                                   'optimizer = "AdamW"\n'))
    assert json.loads(named.deepspeed_json)["optimizer"]["type"] == "AdamW"
    est = estimate(named.settings, named.plan, model=toy(), ds_config=named.deepspeed)
    assert est.chosen.device.optimizer == 4 * P  # AdamW's 8 bytes a parameter over 2 ranks
    assert est.row("ddp").device.optimizer == 0  # a DDP run of these settings builds their SGD
    assert named.estimate.chosen.device.optimizer > 0
    raw = plan_of(settings("zero2", extra='[deepspeed.config.optimizer]\ntype = "Lion"\n'))
    assert estimate(raw.settings, raw.plan, model=toy(), ds_config=raw.deepspeed).chosen.device.optimizer == 2 * P


def test_zero3_persistent_small_parameters_follow_the_threshold():
    base = settings("zero3")
    big = ModelSize(P, "stated", {500: 2}, 100, {}, "unknown")
    low = plan_of(base + '[deepspeed.config.zero_optimization]\nstage3_param_persistence_threshold = 10\n')
    high = plan_of(base + '[deepspeed.config.zero_optimization]\nstage3_param_persistence_threshold = 100000\n')
    buffers_low = estimate(low.settings, low.plan, model=big).chosen.device.buffers
    buffers_high = estimate(high.settings, high.plan, model=big).chosen.device.buffers
    assert buffers_high - buffers_low == 4 * P  # both 500-element tensors kept whole (fp32)


def test_activations_respond_to_sequence_batch_checkpointing_and_precision():
    def act(extra: str, strategy: str = "ddp") -> int:
        r = plan_of(settings(strategy, extra=extra))
        return estimate(r.settings, r.plan).chosen.device.activations

    base = act('[data]\nseq_len = 256\n')
    assert act('[data]\nseq_len = 512\n') == pytest.approx(2 * base, rel=0.01)
    assert act('[data]\nseq_len = 256\n[training]\nmicro_batch_size = 4\n') == pytest.approx(4 * base, rel=0.01)
    assert act('[data]\nseq_len = 256\n[training]\ngradient_checkpointing = true\n') < base
    assert act('[data]\nseq_len = 256\n[training]\nmixed_precision = "bf16"\n') < base


def test_context_parallelism_splits_the_sequence():
    extra = '[fsdp]\nenabled = true\nversion = 2\n[data]\nseq_len = 1024\n'
    one = plan_of(settings(processes=4, extra=extra, platform="cuda"))
    two = plan_of(settings(processes=4, extra=extra + "[context_parallel]\nsize = 2\n", platform="cuda"))
    a1 = estimate(one.settings, one.plan).chosen.device.activations
    a2 = estimate(two.settings, two.plan).chosen.device.activations
    assert a2 == pytest.approx(a1 / 2, rel=0.02)


def test_lora_trains_a_fraction():
    full = plan_of(settings("fsdp2"))
    text = '[model]\npath = "builtin:tiny-llama"\ntype = "lora"\nlora_rank = 4\n[hardware]\nplatform = "cpu"\nnum_processes = 2\n' \
           '[fsdp]\nenabled = true\nversion = 2\n'
    lora = plan_of(text)
    f, l_ = estimate(full.settings, full.plan).chosen, estimate(lora.settings, lora.plan).chosen
    # The model gains PEFT's adapters (rank 4 on q_proj and v_proj, both 64 -> 64, in 2 layers:
    # 2 * 2 * 4 * (64 + 64) = 2,048 parameters); gradients and Adam state are theirs alone.
    adapters = 2 * 2 * 4 * (64 + 64)
    assert l_.device.params == f.device.params + 4 * adapters // 2
    assert l_.device.grads == 4 * adapters // 2 and l_.device.optimizer == 8 * adapters // 2


def _seven_b(tmp_path, body: str) -> Path:
    model = write_model(tmp_path, "llama-7b", LLAMA2_7B)
    path = tmp_path / "settings.toml"
    path.write_text(f'[model]\npath = "{model.name}"\n' + body)
    return path


def test_fit_and_recommendation_for_a_7b_model(tmp_path):
    path = _seven_b(tmp_path, '[hardware]\nplatform = "cuda"\nnum_processes = 8\ngpu_memory_gib = 80\n'
                              'host_memory_gib = 1024\n[deepspeed]\nenabled = true\nzero_stage = 3\n'
                              '[training]\nmixed_precision = "bf16"\n[data]\nseq_len = 2048\n')
    result = compile_file(path)
    est = estimate(result.settings, result.plan, base_dir=tmp_path)
    assert est.model.parameters == 6_738_415_616 and est.model.source == "config.json"
    assert est.row("ddp").fits_gpu is False  # 16 bytes/parameter = 100 GiB
    assert est.row("zero1").fits_gpu is True
    assert est.recommendation == "zero1"  # the seed's advice: the lowest ZeRO stage that fits
    assert est.gpu_capacity == 80 * GIB and "stated" in est.capacity_source
    assert not [d for d in result.diagnostics.items if d.key == "hardware.gpu_memory_gib"]


def test_compiler_warns_when_the_strategy_does_not_fit(tmp_path):
    path = _seven_b(tmp_path, '[hardware]\nplatform = "cuda"\nnum_processes = 8\ngpu_memory_gib = 40\n'
                              '[training]\nmixed_precision = "bf16"\n')
    result = compile_file(path)
    assert result.ok  # a warning, not an error
    warn = [d for d in result.diagnostics.items if d.key == "hardware.gpu_memory_gib"]
    assert len(warn) == 1 and warn[0].severity == "warning"
    assert "DDP needs about" in warn[0].message and "36.00 GiB usable of 40.00 GiB" in warn[0].message
    assert "cheapest option that fits" in warn[0].fix


def test_nvme_free_space_check_uses_the_estimate(tmp_path):
    huge = {**LLAMA2_7B, "hidden_size": 16384, "intermediate_size": 53248, "num_hidden_layers": 126,
            "num_attention_heads": 128, "num_key_value_heads": 8}
    model = write_model(tmp_path, "huge", huge)
    (tmp_path / "swap").mkdir()
    path = tmp_path / "settings.toml"
    path.write_text(f'[model]\npath = "{model}"\n[hardware]\nplatform = "cuda"\nnum_processes = 8\n'
                    '[deepspeed]\nenabled = true\nzero_stage = 3\noffload_param = "nvme"\noffload_optimizer = "nvme"\n'
                    f'nvme_path = "{tmp_path / "swap"}"\n[training]\nmixed_precision = "bf16"\n')
    result = compile_file(path)
    found = find_model(str(model), "causal_lm", "", None)
    plan = result.plan
    need = model_facts.nvme_bytes(result.settings, plan.strategy, plan.world_size, plan.processes_per_machine,
                                  plan.platform, found)
    assert need > 10**12 * 5
    msg = [d.message for d in result.diagnostics.errors if d.key == "deepspeed.nvme_path"]
    assert msg and "the offloaded state needs about" in msg[0]


def test_wrap_classes_are_checked_against_detection(tmp_path, models):
    from tuner.runtime.blocks import detect

    body = ('[hardware]\nplatform = "cpu"\nnum_processes = 2\n[fsdp]\nenabled = true\nversion = 2\n'
            'transformer_layer_cls_to_wrap = ["LlamaDecoderLayr", "BertLayer"]\n')
    path = tmp_path / "settings.toml"
    path.write_text(f'[model]\npath = "{models["llama"]}"\n' + body)
    before = compile_file(path)
    assert before.ok and any("tuner blocks" in d.fix for d in before.diagnostics.items
                             if d.key == "fsdp.transformer_layer_cls_to_wrap")
    detect(str(models["llama"]))  # what `tuner blocks` or the wizard does; cached as JSON
    after = compile_file(path)
    errors = [d for d in after.diagnostics.errors if d.key == "fsdp.transformer_layer_cls_to_wrap"]
    assert len(errors) == 2
    assert "did you mean 'LlamaDecoderLayer'" in errors[0].fix
    assert "detected candidates: LlamaDecoderLayer" in errors[1].fix
    path.write_text(path.read_text().replace('"LlamaDecoderLayr", "BertLayer"', '"LlamaDecoderLayer"'))
    assert compile_file(path).ok


def test_wrap_classes_of_unavailable_models_get_a_note(tmp_path):
    text = ('[model]\npath = "/nowhere/model"\n[hardware]\nplatform = "cpu"\nnum_processes = 2\n'
            '[fsdp]\nenabled = true\ntransformer_layer_cls_to_wrap = ["Block"]\n')
    r = compile_text(text)
    notes = [d for d in r.diagnostics.items if d.key == "fsdp.transformer_layer_cls_to_wrap"]
    assert r.ok and notes[0].severity == "note" and "not available" in notes[0].message


def test_cli_estimate_json_and_table(tmp_path):
    path = _seven_b(tmp_path, '[hardware]\nplatform = "cuda"\nnum_processes = 8\ngpu_memory_gib = 80\n'
                              '[fsdp]\nenabled = true\nversion = 2\n[training]\nmixed_precision = "bf16"\n')
    out = run_tuner("estimate", str(path), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["strategy"] == "fsdp2" and data["chosen"]["name"] == "fsdp2"
    assert [s["name"] for s in data["strategies"]] == list(COMPARED)
    assert data["fits"] is True and data["recommendation"] == "fsdp2"
    assert data["recommendation_line"] == "FSDP2" and data["usable_gpu"] == int(80 * GIB * 0.9)
    text = run_tuner("estimate", str(path), "--set", "fsdp.enabled=false")
    assert text.returncode == 0 and "> DDP (chosen)" in text.stdout and "recommended: ZeRO-1" in text.stdout
    assert "ZeRO-3 + NVMe offload" in text.stdout and "full state dict save" in text.stdout
    table = estimate_table(path.read_text(), path)  # the wizard's Review step
    assert "\n> FSDP2 " in table


def test_compile_stays_torch_free_with_services_in_play(tmp_path, models):
    """Detection cache, analytic counts, injected facts: `tuner compile` imports no torch."""
    from tuner.runtime.blocks import detect

    detect(str(models["llama"]))
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"platform": "cuda", "gpus": [{"index": 0, "name": "A100", "memory_bytes": 80 * GIB}],
                                 "host_memory_bytes": 512 * GIB}))
    path = tmp_path / "settings.toml"
    path.write_text(f'[model]\npath = "{models["llama"]}"\n[hardware]\nnum_processes = 2\n'
                    '[fsdp]\nenabled = true\ntransformer_layer_cls_to_wrap = ["LlamaDecoderLayer"]\n')
    code = ("import sys; from tuner.commands.cli import main; rc = main(['compile', %r, '-q']); "
            "heavy = [m for m in ('torch', 'accelerate', 'deepspeed', 'textual', 'transformers', 'diffusers') "
            "if m in sys.modules]; print('HEAVY', heavy); sys.exit(rc)" % str(path))
    env = {**os.environ, "TUNER_HARDWARE_FACTS": str(facts)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "HEAVY []" in res.stdout
