"""Fault: NaN targets in the data: the loss is NaN, so are the gradients; nothing crashes.
Expected: loss (and grads)."""
import torch
from accelerate import Accelerator
from common import BATCH, dataset, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
dl = torch.utils.data.DataLoader(dataset(nan=True), batch_size=BATCH, shuffle=False)
m, opt, dl = acc.prepare(m, opt, dl)
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
