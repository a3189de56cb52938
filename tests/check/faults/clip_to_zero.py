"""Fault: gradient clipping with max_norm=0 (a config's "0 = off" read by torch as "clip to
norm 0"): every gradient is scaled to zero, the model never moves. Expected: grads."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader())
max_grad_norm = 0.0  # meant: no clipping
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    acc.clip_grad_norm_(m.parameters(), max_grad_norm)
    opt.step()
    opt.zero_grad()
