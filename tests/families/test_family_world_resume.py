"""The embedding and diffusion families resume at another world size too (issue 33, f).

Embedding (FSDP2, tiny BERT, as the global-negatives test runs it): a 2-rank run (global batch
16 = micro 8 x 2) saves step 2 and goes on to step 4; resumed on 1 rank (micro 16), its steps 3
and 4 equal the reference's within 1e-4 (relative): the in-batch negatives come from the whole
global batch, so the same global batch is the same loss.
Diffusion (FSDP2 UNet with a sharded EMA; kept at the trainer/checkpoint level): a 2-rank
checkpoint resumed on 1 rank re-cuts the per-rank EMA shards for 1 rank (it was refused
before) and its exported EMA is exactly the EMA saved at the step. (The diffusion loss draws
noise from each rank's RNG, so its losses at another world size are not compared.)
2 -> 1 rank (it was 2 -> 4): the re-cut joins the saved shards and cuts them for the new world
whatever its size, and DCP reshards the model and optimizer the same way (the FSDP2 1 <-> 2
ranks resumes of test_portable_resume_matrix.py); 1 rank starts 3 fewer rank processes.
"""

from __future__ import annotations

import json

import pytest
import torch
from families_helpers import run_example
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

EMBED = ("model.path=builtin:tiny-bert", "model.type=full", "training.max_steps=4", "training.validation_every=0",
         "data.validation_split=0", "checkpoint.every_steps=2", "checkpoint.keep_last=3", "checkpoint.export=false",
         "training.lr_scheduler=constant")
UNET = ("training.max_steps=4", "training.validation_every=0", "checkpoint.every_steps=2", "checkpoint.keep_last=3")


def test_embedding_resumes_at_another_world_size(tmp_path):
    ref = run_example("embedding_minilm_lora.toml", tmp_path / "ref", *EMBED, "hardware.num_processes=2",
                      "training.micro_batch_size=8").check()
    resumed = run_example("embedding_minilm_lora.toml", tmp_path / "w1", *EMBED, "hardware.num_processes=1",
                          "training.micro_batch_size=16",
                          args=("--resume", str(ref.out / "checkpoints" / "step-2"))).check()
    assert "global batch kept: 16" in resumed.output
    got, want = resumed.losses(), ref.losses()
    assert sorted(got) == [3, 4]
    for step in (3, 4):
        assert abs(got[step] - want[step]) <= 1e-4 * abs(want[step]), (step, got, want)


def test_diffusion_resumes_at_another_world_size_with_its_ema(tmp_path):
    import diffusers

    ref = run_example("diffusion_unet.toml", tmp_path / "ref", *UNET, "hardware.num_processes=2",
                      "training.micro_batch_size=4").check()
    ckpt = ref.out / "checkpoints" / "step-2"
    resumed = run_example("diffusion_unet.toml", tmp_path / "w1", *UNET, "hardware.num_processes=1",
                          "training.micro_batch_size=8", args=("--resume", str(ckpt), "--max-steps", "2")).check()
    assert "global batch kept: 8" in resumed.output and "resumed from" in resumed.output
    parts = [load_file(str(ckpt / "ema" / f"rank{r}.safetensors")) for r in (0, 1)]
    saved = {k: torch.cat([p[k] for p in parts]) if parts[0][k].dim() else parts[0][k] for k in parts[0]}
    final = resumed.out / "final"
    info = json.loads((final / "tuner_diffusion.json").read_text())
    exported = getattr(diffusers, info["class_name"]).from_pretrained(str(final / f"ema_{info['denoiser']}")).state_dict()
    assert saved and saved.keys() <= exported.keys()
    for k, v in saved.items():
        torch.testing.assert_close(exported[k].float(), v.reshape(exported[k].shape), rtol=0, atol=0)
