"""Fault: backward every batch, but optimizer.step() is never called (lost in a refactor):
the loss is logged, nothing is learned. Expected: optimizer-step."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader())
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.zero_grad()
