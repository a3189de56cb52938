"""Fault (FSDP2 build): only the data loader goes through prepare; the model and its
optimizer are used as built. The build's FSDP settings never reach the model: every rank
holds and trains a whole, unsynchronised copy. Expected: sharding (and prepared)."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
dl = acc.prepare(loader())
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
