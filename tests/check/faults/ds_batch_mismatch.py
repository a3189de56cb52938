"""Fault (DeepSpeed build, micro batch 8): the script's DataLoader uses batch 4; DeepSpeed
counts 8 per rank (its global batch, LR schedule by samples and throughput are off by 2x).
Expected: batch-arithmetic."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader(batch=4))
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
