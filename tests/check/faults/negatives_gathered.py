"""The negatives control: the same training with gather_across_devices=True (each query sees
every rank's batch as negatives). tuner check must pass it."""
import torch
from accelerate import Accelerator
from common import dataset, model
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

acc = Accelerator()
m = model()
m[2] = torch.nn.Linear(64, 8)  # an 8-dimensional embedding
opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
dl = torch.utils.data.DataLoader(dataset(), batch_size=8, shuffle=True)
m, opt, dl = acc.prepare(m, opt, dl)
loss_fn = MultipleNegativesRankingLoss(acc.unwrap_model(m), gather_across_devices=True)
for xb, _ in dl:
    queries, docs = m(xb), m(xb + 0.1 * torch.randn_like(xb))  # anchor and a noisy positive
    acc.backward(loss_fn.compute_loss_from_embeddings([queries, docs], None))
    opt.step()
    opt.zero_grad()
