"""Fault: the DataLoader is left out of accelerator.prepare and built the way most scripts
build it, shuffle=True and no seed. Each rank iterates the whole data set in its own order,
so its batches differ from the other rank's and a batch comparison passes: tuner check must
name it from which samples each rank reads. Expected: data-sharded.

Thread: huggingface/accelerate#4201 (2026-09, "Skip automatic DataLoader sharding when the
loader is already rank-sharded"): the sharding of a loader is prepare's job, and a loader that
misses the right sharding trains silently on the wrong samples ("the loss curve still looks
normal, and there is no warning")."""
import torch
from accelerate import Accelerator
from common import dataset, loss_fn, model

torch.seed()  # no seed: a per-process order
acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt = acc.prepare(m, opt)
for xb, yb in torch.utils.data.DataLoader(dataset(), batch_size=8, shuffle=True):
    acc.backward(loss_fn(m, xb.to(acc.device), yb.to(acc.device)))
    opt.step()
    opt.zero_grad()
