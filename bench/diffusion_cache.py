"""Diffusion training steps/s with the latent and text-embedding cache ÷ without it, one run.

    python bench/diffusion_cache.py [--steps 20] [--resolution 64] [--batch 4]

The model is a Stable-Diffusion-shaped pipeline folder built here (nothing downloaded): a
latent `UNet2DConditionModel`, an `AutoencoderKL` (3 levels, 4 latent channels) and a CLIP
text encoder with its tokenizer; the data is tuner's bundled image set at ``--resolution``.
Both arms use the same family code, model, data, batch sampler (one aspect bucket per
step), AdamW and seed, on one CPU process:

* ``cached``: ``data.cache_latents = true``: the items are the cached latents and
  embeddings (the cache is built first; its build time is printed apart);
* ``uncached``: ``data.cache_latents = false``: every step loads and resizes the images,
  runs the VAE encoder and the text encoder, then the same denoiser step.

Printed: steps/s of each arm over ``--steps`` timed steps (after 2 warm-up steps) and the
ratio cached ÷ uncached.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch


def sd_folder(folder: Path) -> None:
    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel
    from tuner.runtime.families.text import build_tiny_tokenizer

    torch.manual_seed(0)
    UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
                         block_out_channels=(32, 64), down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                         up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=64,
                         attention_head_dim=8, norm_num_groups=16).save_pretrained(folder / "unet")
    AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 3,
                  up_block_types=("UpDecoderBlock2D",) * 3, block_out_channels=(32, 64, 64), latent_channels=4,
                  layers_per_block=2, norm_num_groups=16, sample_size=64).save_pretrained(folder / "vae")
    tok = build_tiny_tokenizer()
    tok.model_max_length = 32
    tok.save_pretrained(str(folder / "tokenizer"))
    CLIPTextModel(CLIPTextConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=256, num_hidden_layers=4,
                                 num_attention_heads=4, max_position_embeddings=32, pad_token_id=tok.pad_token_id,
                                 bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)
                  ).save_pretrained(folder / "text_encoder")
    DDPMScheduler(num_train_timesteps=1000, clip_sample=False).save_pretrained(folder / "scheduler")


def arm(root: Path, cached: bool, args) -> tuple[float, float]:
    """(steps/s, cache build seconds) of one arm."""
    from torch.utils.data import DataLoader
    from tuner.compiler.keys.settings import Settings
    from tuner.runtime.data_sources.buckets import BucketBatchSampler
    from tuner.runtime.data_sources.driver import rank_data
    from tuner.runtime.families.base import FamilyContext
    from tuner.runtime.families.diffusion.family import DiffusionFamily

    s = Settings.from_dict({"model": {"family": "diffusion", "path": str(root / "sd")},
                            "data": {"path": "builtin", "resolution": args.resolution, "validation_split": 0.0,
                                     "cache_latents": cached},
                            "output": {"dir": str(root / "out")}})
    fam = DiffusionFamily(FamilyContext(settings=s, base_dir=root, seed=0))
    t0 = time.perf_counter()
    data = rank_data(fam)
    train = data.train
    build = time.perf_counter() - t0
    torch.manual_seed(0)
    model = fam.prepare_model(fam.build_model())
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    loader = DataLoader(train, batch_sampler=BucketBatchSampler(train.bucket_of, args.batch, 1, 1, 0), collate_fn=data.collate)
    batches = iter(())
    done, t_start = 0, 0.0
    while done < args.steps + 2:
        batch = next(batches, None)
        if batch is None:
            batches = iter(loader)
            continue
        if done == 2:
            t_start = time.perf_counter()
        loss = fam.loss(model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        done += 1
    return args.steps / (time.perf_counter() - t_start), build


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--resolution", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sd_folder(root / "sd")
        uncached, _ = arm(root, False, args)
        cached, build = arm(root, True, args)
    print(f"resolution {args.resolution}, micro-batch {args.batch}, {args.steps} timed steps, 1 CPU thread")
    print(f"uncached (VAE + text encoder every step): {uncached:.2f} steps/s")
    print(f"cached (latents + embeddings from disk):  {cached:.2f} steps/s (cache built first in {build:.1f} s)")
    print(f"ratio cached / uncached: {cached / uncached:.2f}x")


if __name__ == "__main__":
    main()
