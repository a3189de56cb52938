"""Fault (FSDP2 build wrapping each Linear): an extra head layer left in float64 (loaded
from a checkpoint in another dtype). Each FSDP unit is uniform, so nothing complains, but
the model mixes dtypes: mixed precision, communication and memory are not what was planned.
Expected: dtypes."""
import torch
from accelerate import Accelerator
from common import loader, model


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = model()
        self.head = torch.nn.Linear(1, 1, dtype=torch.float64)

    def forward(self, x):
        return self.head(self.body(x).double()).float()


acc = Accelerator()
m = Mixed()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
m, opt, dl = acc.prepare(m, opt, loader())
for xb, yb in dl:
    acc.backward(torch.nn.functional.mse_loss(m(xb), yb))
    opt.step()
    opt.zero_grad()
