"""Fault: the optimizer is built on a copy of the model (an EMA / reference copy mixed up):
the trained model never changes. Expected: optimizer-params (and grads)."""
import copy

import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
ema = copy.deepcopy(m)
opt = torch.optim.AdamW(ema.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader())
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
