"""LoRA under DeepSpeed ZeRO-2 and ZeRO-3 (issue 34 item 8): `tuner run` trains PEFT adapters on
two real gloo ranks, and the adapters it saves come from every rank's partitions.

One launch per stage (module-scoped), several assertions each: only the adapters train and
they learn; ZeRO-3 really partitions the parameters; the run's merged export reproduces the
trained (partitioned) model's logits; the unmerged adapter in ``final/adapter/`` loads with
``PeftModel.from_pretrained`` on the base model folder the run started from and gives those
logits too; `tuner checkpoint export` of the last checkpoint writes the same adapter and model.
"""

from __future__ import annotations

import re

import pytest
import torch
from runtime_helpers import assert_ok, merged, tuner_run
from test_strategies import LOGITS_ATOL, _rows_tensor, assert_estimate_matches_the_ranks

from tests import harness

pytestmark = pytest.mark.slow

TARGETS = ["q_proj", "v_proj", "gate_proj"]


def _write_base(folder) -> None:
    """A micro Llama saved as a model folder (the base a LoRA run starts from and PEFT loads)."""
    from transformers import set_seed
    from tuner.compiler.keys.settings import Settings
    from tuner.runtime.families.base import FamilyContext
    from tuner.runtime.families.causal_lm import CausalLMFamily

    s = Settings.from_dict({"model": {"path": "builtin:micro-llama"}})
    set_seed(7)
    CausalLMFamily(FamilyContext(s, folder.parent)).build_model().save_pretrained(str(folder))


@pytest.fixture(scope="module", params=[2, 3], ids=["zero2", "zero3"])
def lora_ds(request, runtime_tmp):
    stage = request.param
    d = runtime_tmp / f"lora-zero{stage}"
    d.mkdir(parents=True, exist_ok=True)
    _write_base(d / "base")
    settings = merged(model={"path": "base", "type": "lora", "lora_rank": 8, "lora_alpha": 32,
                             "lora_target_modules": TARGETS},
                      deepspeed={"enabled": True, "zero_stage": stage}, training={"learning_rate": 0.05})
    run = tuner_run(d, settings)
    assert_ok(run)
    return stage, run


def _logits(model, run) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(input_ids=_rows_tensor(run.dir)[:2]).logits[:, :4, :8]


def _adapter(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def test_only_adapters_train_and_learn(lora_ds):
    stage, run = lora_ds
    total, trainable = (int(s.replace(",", "")) for s in
                        re.search(r"parameters: ([\d,]+) total, ([\d,]+) trainable", run.output).groups())
    assert 0 < trainable < total / 8, (total, trainable)
    assert f"zero{stage} on 2 rank(s) (DEEPSPEED" in run.output
    vals = [m["val_loss"] for m in run.metrics() if "val_loss" in m]
    assert vals[-1] < run.losses()[1] - 0.03, f"ZeRO-{stage}: the adapters learned nothing: {vals}"
    t0 = run.traces[0]
    ratio = t0["local_params"] / t0["total_params"]
    if stage == 3:
        assert 0.45 <= ratio <= 0.55, f"ZeRO-3 partitions the base and the adapters: rank 0 holds {ratio:.2f}"
    else:
        assert ratio == 1.0


def test_estimated_rank_state_matches_the_ranks(lora_ds):
    """The memory estimate of a LoRA build against what each rank held: the base's parameters
    plus the adapters' (ZeRO-3 partitions both), and gradients, fp32 master copy and Adam state
    for the adapters only (the optimizer gets the trainable parameters)."""
    _stage, run = lora_ds
    assert_estimate_matches_the_ranks(run)


def test_merged_export_reproduces_the_trained_model(lora_ds):
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    stage, run = lora_ds
    final = run.out / "final"
    with safe_open(str(final / "model.safetensors"), "pt") as f:
        assert not [k for k in f.keys() if "lora" in k]
    logits = _logits(AutoModelForCausalLM.from_pretrained(str(final)), run)
    torch.testing.assert_close(logits, torch.tensor(run.traces[0]["logits"]), atol=LOGITS_ATOL, rtol=1e-4)


def test_adapter_loads_with_peft_on_the_base(lora_ds):
    """PeftModel.from_pretrained(base, final/adapter) is the trained model: every adapter
    tensor whole (both ranks' partitions of each lora_B, which starts at zero, were trained
    and gathered), and its logits equal the trained model's."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    stage, run = lora_ds
    adapter_dir = run.out / "final" / "adapter"
    assert (adapter_dir / "adapter_config.json").is_file()
    tensors = _adapter(adapter_dir)
    b_mats = {k: v for k, v in tensors.items() if "lora_B" in k}
    assert len(b_mats) == 2 * len(TARGETS), sorted(tensors)  # 2 layers x 3 targets
    for name, b in b_mats.items():
        flat = b.flatten()
        half = flat.numel() // 2
        assert flat[:half].abs().sum() > 0 and flat[half:].abs().sum() > 0, f"{name}: a rank's partition is zero"
    base = AutoModelForCausalLM.from_pretrained(str(run.dir / "base"))
    plain = _logits(base, run)
    model = PeftModel.from_pretrained(base, str(adapter_dir))
    logits = _logits(model, run)
    expected = torch.tensor(run.traces[0]["logits"])
    torch.testing.assert_close(logits, expected, atol=LOGITS_ATOL, rtol=1e-4)
    assert (plain - expected).abs().max() > 1e-3, "the adapter changes the base model's output"


def test_checkpoint_export_writes_the_same_adapter(lora_ds):
    from safetensors.torch import load_file

    stage, run = lora_ds
    out = run.dir / "export-step-10"
    proc = harness.tuner('checkpoint', 'export', str(run.out / 'checkpoints' / 'step-10'), '--out', str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours, final = _adapter(out / "adapter"), _adapter(run.out / "final" / "adapter")
    assert sorted(ours) == sorted(final)
    for k in ours:
        torch.testing.assert_close(ours[k], final[k], atol=1e-7, rtol=0, msg=k)
    merged_ours = load_file(str(out / "model.safetensors"))
    merged_final = load_file(str(run.out / "final" / "model.safetensors"))
    for k in merged_final:
        torch.testing.assert_close(merged_ours[k], merged_final[k], atol=1e-7, rtol=0, msg=k)
