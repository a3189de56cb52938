"""Fault (FSDP2 build): the full state dict gathered on the main process only. Under FSDP2
accelerator.get_state_dict gathers every rank's DTensor shards (a collective), so the main
process waits in the gather while the other ranks wait at wait_for_everyone(): the ranks hang
until the process group's timeout (30 minutes by torch's default). Expected: collectives.

accelerate's docs ("Saving and loading": FSDP) say to call get_state_dict on every process;
the same hang, with peft >= 0.22, from get_peft_model_state_dict on the main process only
(peft_adapter_save_fsdp2.py)."""
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
if acc.is_main_process:
    torch.save(acc.get_state_dict(m), "model.pt")
acc.wait_for_everyone()
