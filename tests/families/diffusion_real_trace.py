"""A trainer callback the real-model diffusion runs give `tuner run` (``--callback
diffusion_real_trace:trace``; the test copies this file beside the settings, whose folder
is on the ranks' path): per micro-batch, each rank appends to
``OUTPUT_DIR/real-trace/rank<R>.jsonl`` the batch's tensors' shapes, the encoders the family
has built so far (``fam.loaded``) and holds now, and the classes FSDP2 made units of."""

from __future__ import annotations

import json
from pathlib import Path

from tuner.runtime.callbacks import TrainerCallback


class Trace(TrainerCallback):
    def on_batch_start(self, trainer, batch) -> None:
        from torch.distributed.fsdp import FSDPModule

        units = sorted({type(m).__name__.removeprefix("FSDP") for m in trainer.model.modules()
                        if isinstance(m, FSDPModule)})
        out = Path(trainer.out) / "real-trace" / f"rank{trainer.rank}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a") as f:
            f.write(json.dumps({"step": trainer.step, "shapes": {k: list(v.shape) for k, v in batch.items()
                                                                 if hasattr(v, "shape")},
                                "loaded": list(trainer.fam.loaded),
                                "holds": trainer.fam._cond is not None or trainer.fam._vae is not None,
                                "fsdp_units": units}) + "\n")


def trace() -> Trace:
    return Trace()
