"""A trainer callback the diffusion run tests give `tuner run` (``--callback
diffusion_trace:buckets``; the test copies this file beside the settings, whose folder is on
the ranks' path): each rank appends, per micro-batch, the optimizer step it belongs to and
the batch's latent height and width, and whether the family holds a VAE or text
encoder, to ``OUTPUT_DIR/bucket-trace/rank<R>.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path

from tuner.runtime.callbacks import TrainerCallback


class Buckets(TrainerCallback):
    def on_batch_start(self, trainer, batch) -> None:
        x = batch["latents"] if "latents" in batch else batch["pixel_values"]
        out = Path(trainer.out) / "bucket-trace" / f"rank{trainer.rank}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a") as f:
            f.write(json.dumps({"step": trainer.step, "epoch": trainer.epoch, "hw": list(x.shape[-2:]),
                                "n": int(x.shape[0]),
                                "encoders": trainer.fam._cond is not None or trainer.fam._vae is not None}) + "\n")


def buckets() -> Buckets:
    return Buckets()
