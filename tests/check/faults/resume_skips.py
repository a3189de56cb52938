"""The resume control: the same mid-epoch resume, with accelerator.skip_first_batches for the
batches the epoch already trained. tuner check must pass it."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader(steps=4))
for i, (xb, yb) in enumerate(dl):
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
    if i == 1:
        break
acc.save_state("ckpt_control")
acc.wait_for_everyone()
acc.load_state("ckpt_control")
for xb, yb in acc.skip_first_batches(dl, 2):
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
