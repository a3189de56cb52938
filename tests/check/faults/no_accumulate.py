"""Fault (build with gradient accumulation 4): the loop steps the optimizer at every micro
batch (no accelerator.accumulate): the effective batch is 4x smaller than the settings'.
Expected: optimizer-step."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader(batch=2, steps=8))
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
