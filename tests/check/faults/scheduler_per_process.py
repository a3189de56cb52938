"""Fault: the settings' schedule is built for optimizer steps and passed to
accelerator.prepare, whose scheduler steps num_processes times per optimizer step: warmup and
decay run world-size times too fast (diffusers' scripts multiply the lengths by
accelerator.num_processes for this). Expected: lr, "the scheduler steps once per process".

Thread: huggingface/diffusers#9633 ("Confusion about accelerator.num_processes in
get_scheduler": one training script scales the lengths by num_processes, another does not);
SimpleTuner's resume-with-another-world report in diffusers#8312 (bghira, 2024-09)."""
import torch
from accelerate import Accelerator
from common import LR, settings_model, settings_schedule, token_loader

acc = Accelerator()
m = settings_model()
opt = torch.optim.AdamW(m.parameters(), lr=LR)
m, opt, dl, sched = acc.prepare(m, opt, token_loader(), settings_schedule(opt))
for (ids,) in dl:
    acc.backward(m(input_ids=ids, labels=ids).loss)
    opt.step()
    sched.step()
    opt.zero_grad()
