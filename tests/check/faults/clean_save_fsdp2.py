"""The FSDP2 save control: every rank gathers the full state dict (accelerator.get_state_dict),
the main process writes it. tuner check must pass it (save: whole tensors)."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader())
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
state = acc.get_state_dict(m)
if acc.is_main_process:
    torch.save(state, "model.pt")
acc.wait_for_everyone()
