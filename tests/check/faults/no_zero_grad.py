"""Fault: optimizer.zero_grad() is never called: gradients add up across steps (an
unintended, growing accumulation). Expected: optimizer-step."""
import torch
from accelerate import Accelerator
from common import loader, loss_fn, model

acc = Accelerator()
m = model()
opt = torch.optim.SGD(m.parameters(), lr=1e-3)
m, opt, dl = acc.prepare(m, opt, loader())
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
