"""Fault: a loader sharded by its own DistributedSampler is passed to accelerator.prepare,
which shards it again: each rank reads 1/world^2 of the data, the rest is never seen, the
loss curve looks normal. Expected: data-sharded.

Thread: huggingface/accelerate#4075 (2026-06, "Support already-sharded DataLoaders in
Accelerator.prepare": "The result is effectively double-sharding"), #4087, #4201."""
import torch
from accelerate import Accelerator
from common import dataset, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
data = dataset(steps=6)
sampler = torch.utils.data.DistributedSampler(data, num_replicas=acc.num_processes, rank=acc.process_index)
m, opt, dl = acc.prepare(m, opt, torch.utils.data.DataLoader(data, batch_size=8, sampler=sampler))
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
