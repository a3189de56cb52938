"""Fault: the job script clears the launcher's variables (a wrapper that "cleans the
environment", or `python train.py` started once per task): every rank trains alone, a world
of 1, on the whole data. Expected: world-size."""
import os

for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
    os.environ.pop(var, None)

import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from common import loader, loss_fn, model  # noqa: E402

acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader())
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
