"""The packing control: the same packed rows with position_ids and no attention_mask
(transformers builds a per-document mask from position_ids). tuner check must pass it."""
import torch
from accelerate import Accelerator
from common import LR, settings_model, token_loader

acc = Accelerator()
m = settings_model()
opt = torch.optim.AdamW(m.parameters(), lr=LR)
m, opt, dl = acc.prepare(m, opt, token_loader())
for (ids,) in dl:
    pos = torch.arange(8).repeat(2).expand(ids.shape[0], -1)
    acc.backward(m(input_ids=ids, labels=ids, position_ids=pos).loss)
    opt.step()
    opt.zero_grad()
