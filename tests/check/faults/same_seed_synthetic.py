"""Fault: synthetic batches drawn after the same seed on every rank (no DataLoader at all):
each rank trains on identical data. Expected: data-sharded."""
import torch
from accelerate import Accelerator
from common import STEPS, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt = acc.prepare(m, opt)
torch.manual_seed(42)
for _ in range(STEPS):
    xb = torch.randn(8, 16)
    acc.backward(torch.nn.functional.mse_loss(m(xb), xb.sum(1, keepdim=True)))
    opt.step()
    opt.zero_grad()
