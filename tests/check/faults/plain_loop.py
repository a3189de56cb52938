"""The control written the usual way: a shuffled DataLoader, no seed, passed to
accelerator.prepare. Each rank's torch RNG is its own here (torch.seed(), from the OS, as
after any library that reseeds), so without prepare the ranks would shuffle differently;
prepare keeps one order on every rank and shards it. tuner check must pass it."""
import torch
from accelerate import Accelerator
from common import dataset, loss_fn, model

torch.seed()  # no seed: a per-process order
acc = Accelerator()
m = model()
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
dl = torch.utils.data.DataLoader(dataset(), batch_size=8, shuffle=True)
m, opt, dl = acc.prepare(m, opt, dl)
for xb, yb in dl:
    acc.backward(loss_fn(m, xb, yb))
    opt.step()
    opt.zero_grad()
