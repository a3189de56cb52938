"""The control: a correct plain accelerate loop (no fault); tuner check must pass it."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader())
for xb, yb in dl:
    with acc.accumulate(m):
        acc.backward(loss_fn(m, xb, yb))
        opt.step()
        opt.zero_grad()
acc.wait_for_everyone()
