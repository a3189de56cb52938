"""Fault (FSDP2 build): after training, the main process alone saves
`accelerator.unwrap_model(model).state_dict()`. Under FSDP2 that state dict holds DTensor
shards: the file keeps rank 0's half of every weight and nothing fails. Expected: save.

Thread: huggingface/accelerate#3732 (2025-08, "FSDP Sharded peft classifer saving broken": a
sharded FSDP model's save that does not load back whole); accelerate's docs: get_state_dict
gathers, and must run on every process."""
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
    torch.save(acc.unwrap_model(m).state_dict(), "model.pt")
acc.wait_for_everyone()
