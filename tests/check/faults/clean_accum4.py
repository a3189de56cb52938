"""The control for a build with gradient accumulation 4: accumulate 4 micro-batches per
optimizer step, as the settings say (no fault)."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator(gradient_accumulation_steps=4)
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader(batch=2, steps=8))
for xb, yb in dl:
    with acc.accumulate(m):
        acc.backward(loss_fn(m, xb, yb))
        opt.step()
        opt.zero_grad()
