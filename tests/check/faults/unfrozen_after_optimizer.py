"""Fault: the optimizer is built from the trainable parameters while the output layer is
still frozen; it is unfrozen afterwards, so it gets gradients but is never updated.
Expected: optimizer-params."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
for p in m[2].parameters():
    p.requires_grad = False
opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-2)
for p in m[2].parameters():
    p.requires_grad = True  # "unfreeze the head for stage 2" - after the optimizer exists
m, opt, dl = acc.prepare(m, opt, loader())
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
