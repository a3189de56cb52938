"""The EMA control: the same EMA, copied into the model for the export (store, copy_to, save,
restore, as diffusers' scripts do). tuner check must pass it."""
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
    params = list(acc.unwrap_model(m).parameters())
    ema.store(params)
    ema.copy_to(params)
    torch.save(acc.unwrap_model(m).state_dict(), "model.pt")
    ema.restore(params)
acc.wait_for_everyone()
