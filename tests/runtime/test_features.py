"""Training features beyond the strategy itself, on FSDP2: LoRA (peft) on the causal LM with
gradient checkpointing (two gloo ranks: each holds half of every adapter), and bf16 with gradient
checkpointing and a checkpoint at each epoch's end (one rank)."""

from __future__ import annotations

import re

import pytest
import torch
from runtime_helpers import assert_ok, merged, tuner_run
from test_strategies import LOGITS_ATOL, _rows_tensor

from tests import harness

pytestmark = pytest.mark.slow

FSDP2 = {"enabled": True, "version": 2, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def lora_run(runtime_tmp):
    settings = merged(
        model={"type": "lora", "lora_rank": 8, "lora_alpha": 32, "lora_target_modules": ALL_LINEAR},
        fsdp=FSDP2,
        training={"gradient_checkpointing": True, "learning_rate": 0.05, "max_steps": 20},
        checkpoint={"state_dict_type": "full"},  # a full save: every rank's adapter shard gathered
    )
    run = tuner_run(runtime_tmp / "lora-gc", settings)
    assert_ok(run)
    return run


@pytest.fixture(scope="module")
def bf16_run(runtime_tmp):
    # checkpoint.every_epochs (issue 34: the HF Trainer's save_strategy "epoch", axolotl's saves per
    # epoch): one epoch is 7 steps here (packed rows), so a save at step 7 beside every_steps 5 and 10.
    # One rank (micro 8: the same global batch of 8 as 2 ranks x 4): FSDP2's bf16 policy, gradient
    # checkpointing and the epoch's end hold on one rank; the 2-rank FSDP2 properties are the LoRA run's
    # and test_strategies.py's.
    settings = merged(fsdp=FSDP2, training={"mixed_precision": "bf16", "gradient_checkpointing": True,
                                            "micro_batch_size": 8},
                      hardware={"num_processes": 1}, checkpoint={"every_epochs": 1})
    run = tuner_run(runtime_tmp / "bf16-gc", settings)
    assert_ok(run)
    return run


def test_lora_trains_only_adapters(lora_run):
    total, trainable = (int(s.replace(",", "")) for s in
                        re.search(r"parameters: ([\d,]+) total, ([\d,]+) trainable", lora_run.output).groups())
    assert 0 < trainable < total / 4, (total, trainable)
    final_val = [m["val_loss"] for m in lora_run.metrics() if "val_loss" in m][-1]
    assert final_val < lora_run.losses()[1] - 0.03, "the adapters learned something"


def test_lora_export_is_merged(lora_run):
    """The export is a plain model (no adapter keys) whose logits equal the trained
    model's, adapters included: merged into the base weights, not dropped."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    final = lora_run.out / "final"
    with safe_open(str(final / "model.safetensors"), "pt") as f:
        assert not [k for k in f.keys() if "lora" in k]
    model = AutoModelForCausalLM.from_pretrained(str(final)).eval()
    with torch.no_grad():
        logits = model(input_ids=_rows_tensor(lora_run.dir)[:2]).logits[:, :4, :8]
    torch.testing.assert_close(logits, torch.tensor(lora_run.traces[0]["logits"]), atol=LOGITS_ATOL, rtol=1e-4)


def test_full_save_under_fsdp2_keeps_every_ranks_adapter_shard(lora_run, tmp_path):
    """A full state-dict save under FSDP2 holds each LoRA tensor whole: lora_B starts at zero and
    FSDP2 shards it along dim 0, so a save that kept only rank 0's shard (a known peer bug) would
    leave the second half zero or the tensor short. `tuner checkpoint export` of that checkpoint
    writes the same unmerged adapter as the run's own export (gathered live by accelerate)."""

    from safetensors.torch import load_file

    step = lora_run.out / "checkpoints" / "step-20"
    saved = torch.load(step / "pytorch_model_fsdp.bin", map_location="cpu", weights_only=True)
    b_mats = {k: v for k, v in saved.items() if "lora_B" in k}
    assert len(b_mats) == 2 * len(ALL_LINEAR), sorted(b_mats)
    for name, b in b_mats.items():
        assert b.shape[1] == 8 and b.shape[0] in (32, 64, 128), (name, tuple(b.shape))
        half = b.shape[0] // 2
        assert b[:half].abs().sum() > 0 and b[half:].abs().sum() > 0, f"{name}: rank 1's shard is missing"
    out = tmp_path / "export"
    proc = harness.tuner('checkpoint', 'export', str(step), '--out', str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    final = load_file(str(lora_run.out / "final" / "adapter" / "adapter_model.safetensors"))
    assert sorted(ours) == sorted(final) and len(ours) == 4 * len(ALL_LINEAR)
    for k in ours:
        torch.testing.assert_close(ours[k], final[k], atol=0, rtol=0, msg=k)


def test_bf16_with_gradient_checkpointing_trains_and_exports(bf16_run):
    from transformers import AutoModelForCausalLM

    losses = bf16_run.losses()
    assert losses[10] < losses[1] - 0.5, losses
    model = AutoModelForCausalLM.from_pretrained(str(bf16_run.out / "final"))
    assert next(model.parameters()).dtype == torch.float32  # fp32 master weights, bf16 compute


def test_a_checkpoint_at_each_epochs_end(bf16_run):
    """checkpoint.every_epochs = 1 saves when the first epoch ends (before step 10; every_steps saves
    5 and 10), recording the next epoch's start, and once per step."""
    import json

    ck = bf16_run.out / "checkpoints"
    steps = sorted(int(p.name.removeprefix("step-")) for p in ck.iterdir() if p.name.startswith("step-"))
    (epoch_end,) = [s for s in steps if s not in (5, 10)]
    assert len(steps) == 3 and 5 < epoch_end < 10, steps
    meta = json.loads((ck / f"step-{epoch_end}" / "tuner_checkpoint.json").read_text())
    assert (meta["epoch"], meta["batches_in_epoch"]) == (1, 0)
