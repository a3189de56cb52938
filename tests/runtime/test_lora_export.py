"""`tuner checkpoint export` of a LoRA run's checkpoint on one rank and under FSDP2 with sharded
state dicts on two (FSDP2 full and ZeRO-2/3 are in test_features.py and test_lora_deepspeed.py):
the streamed export writes the same unmerged adapter, bit for bit, as the run's own export
(gathered live by accelerate at the end, from the same final weights), and the same merged model.
Under FSDP2 each rank holds half of every lora_B; an export that kept only one rank's half would
differ here. (The one-rank case stands for DDP too: the export picks its reader by the files a
checkpoint holds, not by strategy (export_sources.open_source), and DDP and one rank both write
accelerate's `model.safetensors` of the unwrapped model; it was a 2-rank DDP run before.) The
export runs in this process (`tuner.commands.cli.main`), as the command would.
"""

from __future__ import annotations

import pytest
import torch
from runtime_helpers import assert_ok, merged, tuner_run

pytestmark = pytest.mark.slow

FSDP2 = {"enabled": True, "version": 2, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}
TARGETS = ["q_proj", "v_proj", "down_proj"]
KINDS = {"one_rank": {"hardware": {"platform": "cpu", "num_processes": 1}},
         "fsdp2_sharded": {"fsdp": FSDP2, "checkpoint": {"state_dict_type": "sharded"}}}


@pytest.fixture(scope="module", params=list(KINDS))
def lora_run(request, runtime_tmp):
    extra = {k: dict(v) for k, v in KINDS[request.param].items()}
    settings = merged(model={"type": "lora", "lora_rank": 8, "lora_alpha": 32, "lora_target_modules": TARGETS},
                      training={"learning_rate": 0.05, "max_steps": 4},
                      checkpoint={"every_steps": 4, "keep_last": 1, **extra.pop("checkpoint", {})}, **extra)
    run = tuner_run(runtime_tmp / f"lora-{request.param}", settings, trace=False)
    assert_ok(run)
    return run


def test_checkpoint_export_writes_the_runs_adapter_and_merged_model(lora_run, tmp_path):
    from safetensors.torch import load_file
    from tuner.commands.cli import main

    step = lora_run.out / "checkpoints" / "step-4"
    out = tmp_path / "export"
    assert main(["checkpoint", "export", str(step), "--out", str(out)]) == 0
    final = lora_run.out / "final"
    ours = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    theirs = load_file(str(final / "adapter" / "adapter_model.safetensors"))
    assert sorted(ours) == sorted(theirs) and len(ours) == 2 * len(TARGETS) * 2  # A and B, 2 layers
    assert all(v.abs().sum() > 0 for k, v in ours.items() if "lora_B" in k)  # trained, not the zero init
    for k in ours:
        torch.testing.assert_close(ours[k], theirs[k], atol=0, rtol=0, msg=k)
    merged_ours, merged_final = load_file(str(out / "model.safetensors")), load_file(str(final / "model.safetensors"))
    assert sorted(merged_ours) == sorted(merged_final) and not [k for k in merged_ours if "lora" in k]
    for k in merged_final:
        torch.testing.assert_close(merged_ours[k], merged_final[k], atol=1e-7, rtol=0, msg=k)
