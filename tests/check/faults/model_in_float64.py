"""Fault: a `.double()` left over from a numerics check: the model, its gradients and Adam's
moments take twice the memory the estimate (and the GPU budget) planned. Expected: memory."""
import torch
from accelerate import Accelerator
from common import LR, settings_model, settings_schedule, token_loader

acc = Accelerator()
m = settings_model().double()
opt = torch.optim.AdamW(m.parameters(), lr=LR)
sched = settings_schedule(opt)
m, opt, dl = acc.prepare(m, opt, token_loader())
for (ids,) in dl:
    acc.backward(m(input_ids=ids, labels=ids).loss)
    opt.step()
    sched.step()
    opt.zero_grad()
