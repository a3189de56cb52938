"""Fault: `scheduler.step()` before `optimizer.step()` (torch only warns): every step runs at
the next step's learning rate, the schedule runs one step ahead. Expected: lr (the settings'
schedule)."""
import torch
from accelerate import Accelerator
from common import LR, settings_model, settings_schedule, token_loader

acc = Accelerator()
m = settings_model()
opt = torch.optim.AdamW(m.parameters(), lr=LR)
sched = settings_schedule(opt)
m, opt, dl = acc.prepare(m, opt, token_loader())
for (ids,) in dl:
    acc.backward(m(input_ids=ids, labels=ids).loss)
    sched.step()
    opt.step()
    opt.zero_grad()
