"""The contrastive loss: InfoNCE over the global batch, per Matryoshka dimension."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F


class _GatherWithGrad(torch.autograd.Function):
    """all_gather whose backward hands each rank the summed gradient of its own slice.

    Every rank's loss uses every rank's embeddings, so d(sum of losses)/d(my embeddings) is
    the sum over ranks of the gradient each computed for my slice: an all_reduce of the
    gathered gradient, then my slice. With DDP/FSDP averaging parameter gradients over
    ranks, this gives exactly the gradient of the global-batch loss. (all_reduce rather than
    reduce_scatter: gloo has no reduce_scatter.)
    """

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, sizes: tuple[int, ...]):
        rank = dist.get_rank()
        ctx.sizes, ctx.rank = sizes, rank
        longest = max(sizes)
        padded = tensor.new_zeros((longest,) + tuple(tensor.shape[1:]))
        padded[: tensor.shape[0]] = tensor
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded.contiguous())
        return torch.cat([p[:n] for p, n in zip(parts, sizes, strict=False)], dim=0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        start = sum(ctx.sizes[: ctx.rank])
        return grad[start: start + ctx.sizes[ctx.rank]], None


def gather_with_grad(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(global tensor, offset of this rank's rows) — the tensor itself off a process group."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tensor, 0
    n = torch.tensor([tensor.shape[0]], device=tensor.device)
    sizes = [torch.zeros_like(n) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, n)
    sizes_t = tuple(int(s.item()) for s in sizes)
    return _GatherWithGrad.apply(tensor, sizes_t), sum(sizes_t[: dist.get_rank()])


def info_nce(q: torch.Tensor, p: torch.Tensor, neg: torch.Tensor | None, temperature: float,
             gather: bool = True) -> torch.Tensor:
    """InfoNCE for L2-normalised q [B, D], p [B, D], neg [B, K, D] (or None).

    Candidates for every local query are the positives (and hard negatives) of the GLOBAL
    batch when a process group is up; the target is the query's own positive. The return
    value is the mean over local queries, so averaging it over ranks gives the global mean
    (equal local batch sizes, as the trainer's drop-last loader guarantees).
    """
    cands = p if neg is None else torch.cat([p, neg.reshape(-1, neg.shape[-1])], dim=0)
    n_local = p.shape[0]
    if gather:
        all_p, offset = gather_with_grad(p)
        if neg is not None:
            all_n, _ = gather_with_grad(neg.reshape(-1, neg.shape[-1]))
            cands = torch.cat([all_p, all_n], dim=0)
        else:
            cands = all_p
    else:
        offset = 0
    logits = q @ cands.T / temperature
    target = torch.arange(offset, offset + n_local, device=q.device)
    return F.cross_entropy(logits.float(), target)


def contrastive_loss(emb: torch.Tensor, batch_size: int, num_negatives: int, temperature: float,
                     dims: Sequence[int] = (), gather: bool = True) -> torch.Tensor:
    """Split stacked embeddings [q; p; neg] and average InfoNCE over Matryoshka dims.

    ``dims`` empty uses the full width; each dimension truncates then re-normalises (MRL).
    """
    q, p = emb[:batch_size], emb[batch_size: 2 * batch_size]
    neg = emb[2 * batch_size:].reshape(batch_size, num_negatives, -1) if num_negatives else None
    widths = list(dims) or [emb.shape[-1]]
    too_wide = [d for d in widths if d > emb.shape[-1]]
    if too_wide:
        raise ValueError(f"mrl_dims {too_wide} exceed the embedding width {emb.shape[-1]}")
    losses = []
    for d in widths:
        qd = F.normalize(q[..., :d].float(), dim=-1)
        pd = F.normalize(p[..., :d].float(), dim=-1)
        nd = F.normalize(neg[..., :d].float(), dim=-1) if neg is not None else None
        losses.append(info_nce(qd, pd, nd, temperature, gather=gather))
    return torch.stack(losses).mean()
