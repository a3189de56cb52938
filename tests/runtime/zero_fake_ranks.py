"""Write real DeepSpeed ZeRO-1/2 checkpoints of two ranks from ONE process, for the ZeRO export
reader's test (tests/runtime/test_export_zero.py): each rank in turn joins torch's "fake"
process group (world size 2, collectives do nothing), builds the same seeded model, runs
``deepspeed.initialize`` (which partitions the fp32 master weights for that rank) and
``save_checkpoint``. The files are DeepSpeed's own: its engine and ZeRO optimizer write them.
No training step is taken (with no-op collectives a step's gradients would not be reduced),
so each rank's fp32 slice holds its part of the initial weights.

    python zero_fake_ranks.py OUT VARIANT [VARIANT ...]     # VARIANT in VARIANTS
"""

from __future__ import annotations

import os
import sys

import torch

#: name -> the DeepSpeed config's parts beyond the batch size and the optimizer.
VARIANTS = {
    "zero2": {"zero_optimization": {"stage": 2}},
    "zero1_bf16": {"zero_optimization": {"stage": 1}, "bf16": {"enabled": True}},
    "zero2_offload_bf16": {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
                           "bf16": {"enabled": True}},
}


class Odd(torch.nn.Module):
    """Parameters of odd sizes (the rank boundary falls inside one), a tied weight (DeepSpeed's
    shared_params), a frozen layer (frozen_param_fragments), an integer and a float buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(7, 5)
        self.b = torch.nn.Linear(5, 3, bias=False)
        self.tied = torch.nn.Linear(7, 5, bias=False)
        self.tied.weight = self.a.weight
        self.frozen = torch.nn.Linear(3, 3)
        self.frozen.requires_grad_(False)
        self.c = torch.nn.Linear(3, 11)
        self.register_buffer("steps", torch.arange(3))
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 2))

    def forward(self, x):
        return self.c(self.frozen(self.b(self.a(x))))


def groups(model: torch.nn.Module) -> list[dict]:
    """Two parameter groups (biases without weight decay), as trainers make them."""
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for n, p in trainable if not n.endswith("bias")], "weight_decay": 0.1},
            {"params": [p for n, p in trainable if n.endswith("bias")], "weight_decay": 0.0}]


def write(out: str, variant: str) -> None:
    import deepspeed
    import deepspeed.utils.groups as ds_groups
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29599")
    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
              **VARIANTS[variant]}
    for rank in range(2):
        os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
        dist.init_process_group("fake", rank=rank, world_size=2, store=FakeStore())
        torch.manual_seed(0)
        model = Odd()
        engine, *_ = deepspeed.initialize(model=model, model_parameters=groups(model), config=config)
        engine.save_checkpoint(os.path.join(out, variant), tag="step")
        dist.destroy_process_group()
        ds_groups._WORLD_GROUP = None  # DeepSpeed keeps the first group's clone otherwise


if __name__ == "__main__":
    for name in sys.argv[2:]:
        write(sys.argv[1], name)
