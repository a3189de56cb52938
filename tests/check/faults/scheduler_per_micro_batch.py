"""Fault (build accumulating 4): the scheduler, not prepared, is stepped on every micro-batch
inside accelerator.accumulate, while the optimizer steps once per 4: the schedule runs 4x
too fast. Expected: lr, "the scheduler steps once per micro-batch".

Thread: starVLA/starVLA#210 (2026-03, "step LR scheduler only on actual optimizer updates":
"This causes the LR scheduler to advance gradient_accumulation_steps times faster")."""
import torch
from accelerate import Accelerator
from common import LR, loader, loss_fn, model, settings_schedule

acc = Accelerator(gradient_accumulation_steps=4)
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=LR)
sched = settings_schedule(opt)
m, opt, dl = acc.prepare(m, opt, loader(batch=2, steps=8))
for xb, yb in dl:
    with acc.accumulate(m):
        acc.backward(loss_fn(m, xb, yb))
        opt.step()
        sched.step()
        opt.zero_grad()
