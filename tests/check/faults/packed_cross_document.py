"""Fault: packed batches (two documents per row, position_ids restarting at each) that also
pass a 2-D attention_mask of ones: transformers reads document boundaries from position_ids
only when attention_mask is None, so every token attends to the document packed before it.
Loss falls, nothing fails. Expected: packing.

Thread: huggingface/transformers#46634 (2026-06, "Fix packed-sequence mask ignored when a 2D
attention_mask is passed": "tokens of a later packed segment attend tokens of an earlier one
(cross-sequence contamination). Loss still decreases, so it is silent")."""
import torch
from accelerate import Accelerator
from common import LR, settings_model, token_loader

acc = Accelerator()
m = settings_model()
opt = torch.optim.AdamW(m.parameters(), lr=LR)
m, opt, dl = acc.prepare(m, opt, token_loader())
for (ids,) in dl:
    pos = torch.arange(8).repeat(2).expand(ids.shape[0], -1)  # two 8-token documents per row
    out = m(input_ids=ids, labels=ids, position_ids=pos, attention_mask=torch.ones_like(ids))
    acc.backward(out.loss)
    opt.step()
    opt.zero_grad()
