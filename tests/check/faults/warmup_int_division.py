"""Fault: a warmup lambda with integer division (step // warmup) keeps the learning rate
at 0 for the whole warmup. Expected: lr."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1, step // 100))
m, opt, dl, sched = acc.prepare(m, opt, loader(), sched)
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    sched.step()
    opt.zero_grad()
