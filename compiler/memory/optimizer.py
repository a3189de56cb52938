"""Which optimizer the ranks build, and the state it keeps per trainable parameter.

Under DeepSpeed the ranks run the optimizer deepspeed.json names (its ``optimizer`` block:
DeepSpeed builds it); a JSON without one leaves it to the training code, which hands DeepSpeed
``training.optimizer`` (`tuner run` builds it; with ZeRO-Offload accelerate swaps a torch
Adam/AdamW for DeepSpeed's CPU Adam, the same state). Outside DeepSpeed it is always
``training.optimizer``. The compile renders the JSON (`plan/deepspeed_offload.optimizer` adds a
block only for a raw ``deepspeed.config`` block or a ``deepspeed.optimizer`` the person set), so
the estimate is given that JSON; without it (a compared strategy of a build that is not
DeepSpeed) the settings' raw ``deepspeed.config`` block is all there is. `estimate.ranks_optimizers`
reads them once per estimate; the per-strategy rows take the result.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Optimizer state bytes per trainable fp32 parameter (8 for one the table does not know).
OPTIMIZER_STATE_BYTES = {"adamw": 8, "adam": 8, "lamb": 8, "onebitadam": 8, "onebitlamb": 8,
                         "zerooneadam": 8, "muadam": 8, "muadamw": 8, "adagrad": 4, "lion": 4,
                         "musgd": 4, "muon": 4, "sgd": 0}


@dataclass(frozen=True)
class RankOptimizers:
    """The optimizer ranks build outside DeepSpeed (``training.optimizer``) and under it."""

    plain: str
    deepspeed: str

    def state_bytes(self, deepspeed: bool) -> int:
        name = self.deepspeed if deepspeed else self.plain
        return OPTIMIZER_STATE_BYTES.get(name.lower().replace("_", "").replace("-", ""), 8)
