"""Fault: a run resumed with accelerator.load_state in the middle of an epoch iterates its
DataLoader from the epoch's first batch again (no skip_first_batches): the batches of that
epoch already trained are trained again, in the new order the restored RNG draws, and the
rest of the epoch is cut short. Expected: resume.

Thread: wyim-pgl/transgenic#59 (2026-09, "A mid-epoch resume re-shuffles the epoch: the
DataLoader skip drops the wrong samples (measured 15 of 20 wrong)", accelerate 1.14) and
huggingface/accelerate#4071 (2026-06, "preserve dataloader iteration state when resuming")."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader(steps=4))  # 4 batches per rank and epoch
for i, (xb, yb) in enumerate(dl):  # the first job: 2 steps, then a checkpoint
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
    if i == 1:
        break
acc.save_state("ckpt_fault")
acc.wait_for_everyone()
acc.load_state("ckpt_fault")  # the resumed job
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
