"""Fault (FSDP2 build): the optimizer is built on the model's parameters, then only the model
goes through accelerator.prepare. FSDP2 replaces the parameters with sharded DTensors; the
optimizer still holds the old, unsharded tensors, steps them, and the model never changes.
Expected: optimizer-params.

Thread: pytorch/pytorch#149205 (2025-03, "Parameter not updating when FSDP2 model is used
before optimizer creation": "The parameters captured by the optimizer seem to differ from
those in the training loop")."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m = acc.prepare(m)
dl = acc.prepare(loader())
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
