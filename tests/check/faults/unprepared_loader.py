"""Fault: the DataLoader is not passed to prepare, so every rank reads the same batches
(the world trains on one rank's data, N times). Expected: data-sharded."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt = acc.prepare(m, opt)
for xb, yb in loader():
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
