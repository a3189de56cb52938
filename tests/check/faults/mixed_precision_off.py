"""Fault (bf16 build): the script hard-codes Accelerator(mixed_precision="no"), overriding
the build's bf16: the run is fp32, slower and bigger than planned. Expected: mixed-precision."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator(mixed_precision="no", gradient_accumulation_steps=4)
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader(batch=2, steps=8))
for xb, yb in dl:
    with acc.accumulate(m):
        acc.backward(loss_fn(m, xb, yb))
        opt.step()
        opt.zero_grad()
