"""Fault: everything frozen, then "unfreeze the head" by a name that matches only one bias:
the run trains 1 of 1,153 parameters although the plan is a full fine-tune. Expected: trainable."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
for name, p in m.named_parameters():
    p.requires_grad = name == "2.bias"  # meant: name.startswith("2.")
opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader())
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
