"""Fault: the script keeps an EMA of the weights (diffusers' EMAModel, stepped after every
optimizer step) and then exports the raw training weights: the EMA it paid for is never
written. Expected: ema.

Thread: lightly-ai/lightly-train#375 (2025-10, "OD: Add ema model": "exports EMA model instead
of usual model if exists", the export had been writing the raw weights)."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model
from diffusers.training_utils import EMAModel

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader())
ema = EMAModel(acc.unwrap_model(m).parameters(), decay=0.99)
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
    ema.step(acc.unwrap_model(m).parameters())
if acc.is_main_process:
    torch.save(acc.unwrap_model(m).state_dict(), "model.pt")
acc.wait_for_everyone()
