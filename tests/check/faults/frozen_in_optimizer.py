"""Fault: the output layer is frozen, but the optimizer is built from model.parameters(),
frozen ones included (optimizer memory for nothing; FSDP v1 refuses such flat parameters).
Expected: optimizer-params."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
for p in m[2].parameters():
    p.requires_grad = False
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader())
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
