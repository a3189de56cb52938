"""Fault: the schedule's lengths were scaled for the 8 GPUs the script was written on
(num_training_steps = max_steps x 8), and the run now has another world size: warmup and
decay stretch 4x on 2 ranks. Expected: lr, "a world of 8 processes".

Thread: huggingface/diffusers#8312 (warmup scaled by num_processes: on resume with another
GPU count the learning rate jumps; bghira, 2024-09) and bghira/SimpleTuner's resume reports."""
import torch
from accelerate import Accelerator
from common import LR, MAX_STEPS, WARMUP, settings_model, token_loader
from transformers import get_scheduler

WRITTEN_FOR = 8  # GPUs
acc = Accelerator()
m = settings_model()
opt = torch.optim.AdamW(m.parameters(), lr=LR)
sched = get_scheduler("linear", opt, num_warmup_steps=WARMUP * WRITTEN_FOR, num_training_steps=MAX_STEPS * WRITTEN_FOR)
m, opt, dl, sched = acc.prepare(m, opt, token_loader(), sched)
for (ids,) in dl:
    acc.backward(m(input_ids=ids, labels=ids).loss)
    opt.step()
    sched.step()
    opt.zero_grad()
