"""Fault: learning rate 0 (a config value read as 0, e.g. int("0") of "0.0001" * 1e-4 typo).
Expected: lr (and params-change)."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=0.0)
m, opt, dl = acc.prepare(m, opt, loader())
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
