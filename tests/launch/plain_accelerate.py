"""A plain accelerate training script, as people write them: no tuner import.

Used by tests/launch: `tuner launch BUILD plain_accelerate.py --out DIR` on every strategy.
Each rank writes DIR/rank-<N>.json with what it saw: its rank and world size, accelerate's
distributed type, the data rows it was given, the loss per step, and how its parameters are
held (DTensor shards under FSDP2, DeepSpeed partitions under ZeRO-3).
"""

import argparse
import json
import os

import torch
from accelerate import Accelerator
from accelerate.utils import DummyOptim

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--steps", type=int, default=16)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--started", default="", help="a file rank 0 creates after its first step")
p.add_argument("--deepspeed-optimizer", action="store_true",
               help="let DeepSpeed build the optimizer (needed with ZeRO optimizer offload)")
args = p.parse_args()

accelerator = Accelerator()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
n_rows = args.steps * args.batch * accelerator.num_processes
x = torch.randn(n_rows, 16)
y = x @ torch.linspace(-1, 1, 16).unsqueeze(1)
data = torch.utils.data.TensorDataset(torch.arange(n_rows), x, y)
loader = torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=True)
if args.deepspeed_optimizer:
    optimizer = DummyOptim(model.parameters(), lr=0.01)
else:
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

losses, rows = [], []
model.train()
for idx, xb, yb in loader:
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
    rows += idx.tolist()
    if args.started and accelerator.is_main_process and len(losses) == 1:
        open(args.started, "w").close()

params = []
for name, prm in model.named_parameters():
    entry = {"name": name, "type": type(prm).__name__, "numel": prm.numel()}
    if hasattr(prm, "to_local"):  # FSDP2: a DTensor; this rank holds a shard
        entry["local_numel"] = prm.to_local().numel()
    if hasattr(prm, "ds_numel"):  # ZeRO-3: the full size, and this rank's partition
        entry["ds_numel"] = prm.ds_numel
        entry["local_numel"] = prm.ds_tensor.numel()
    params.append(entry)

# ZeRO-1/2: each rank's optimizer holds its partition of the fp32 master weights.
zero_opt = getattr(model, "optimizer", None)
partition = sum(t.numel() for t in getattr(zero_opt, "single_partition_of_fp32_groups", []))

os.makedirs(args.out, exist_ok=True)
with open(os.path.join(args.out, f"rank-{accelerator.process_index}.json"), "w") as fh:
    json.dump({
        "process_index": accelerator.process_index,
        "num_processes": accelerator.num_processes,
        "env_rank": int(os.environ.get("RANK", -1)),
        "env_world": int(os.environ.get("WORLD_SIZE", -1)),
        "distributed_type": accelerator.distributed_type.name,
        "losses": losses,
        "rows": rows,
        "params": params,
        "zero_partition_numel": partition,
    }, fh)
accelerator.wait_for_everyone()
accelerator.end_training()
