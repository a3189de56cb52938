"""Fault: a loss mask that is all zeros (padding mask inverted): loss 0, gradients exactly
zero, training "converges" at once. Expected: grads."""
import torch
from accelerate import Accelerator
from common import loader, model

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader())
for xb, yb in dl:
    mask = torch.zeros_like(yb)  # meant: ones where the target is real
    loss = ((m(xb) - yb) ** 2 * mask).mean()
    acc.backward(loss)
    opt.step()
    opt.zero_grad()
