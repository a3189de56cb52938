"""The control of the settings-model group: the build's model (./model), AdamW at the
settings' learning rate under the settings' linear schedule, stepped once per optimizer step.
tuner check compares its per-rank model state with the estimate and its lr with the
schedule, and must pass it."""
import torch
from accelerate import Accelerator
from common import LR, settings_model, settings_schedule, token_loader

acc = Accelerator()
m = settings_model()
opt = torch.optim.AdamW(m.parameters(), lr=LR)
sched = settings_schedule(opt)
m, opt, dl = acc.prepare(m, opt, token_loader())
for (ids,) in dl:
    acc.backward(m(input_ids=ids, labels=ids).loss)
    opt.step()
    sched.step()
    opt.zero_grad()
