"""Fault: the model is not passed to prepare (only optimizer and data): it is not wrapped,
gradients are never synchronised, every rank drifts apart. Expected: prepared."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
opt, dl = acc.prepare(opt, loader())
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
