"""Fault: contrastive embedding training with in-batch negatives (sentence-transformers'
MultipleNegativesRankingLoss) on 2 ranks, gather_across_devices left False: each query sees
only its own rank's batch as negatives, half what the global batch size promises. Expected:
negatives.

Thread: huggingface/sentence-transformers#3149 (2025-01, "MNRL with DDP, how many in-batch
negatives will there be?": per device, not per global batch) and #3442 (2025-07, which added
gather_across_devices)."""
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
loss_fn = MultipleNegativesRankingLoss(acc.unwrap_model(m))
for xb, _ in dl:
    queries, docs = m(xb), m(xb + 0.1 * torch.randn_like(xb))  # anchor and a noisy positive
    acc.backward(loss_fn.compute_loss_from_embeddings([queries, docs], None))
    opt.step()
    opt.zero_grad()
