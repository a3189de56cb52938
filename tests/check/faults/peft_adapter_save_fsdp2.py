"""Fault (FSDP2 build): a LoRA model trained under FSDP2 whose adapters the main process saves
with get_peft_model_state_dict: each adapter tensor is a DTensor shard, so the file keeps only
rank 0's slice of it (on N ranks, (N-1)/N of every adapter is lost). Expected: save.
From peft 0.22 get_peft_model_state_dict gathers the shards itself (a collective): on the main
process only it waits forever for the other ranks. Expected there: collectives
(test_rehearsal.py's collectives test; the catalogue runs it with peft < 0.22 only).

Thread: huggingface/accelerate#4206 (2026-09, "Fix FSDP2/PEFT/FULL_STATE_DICT dropping every
rank's adapter shard except rank 0": accelerate's own adapter-only save did exactly this)."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

acc = Accelerator()
m = get_peft_model(model(), LoraConfig(r=4, target_modules=["0", "2"]))
opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader())
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
if acc.is_main_process:
    torch.save(get_peft_model_state_dict(acc.unwrap_model(m)), "adapter.pt")
acc.wait_for_everyone()
