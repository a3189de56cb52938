"""Contrastive losses with in-batch negatives (`negatives`): on several ranks, each rank's
loss sees only its own batch's negatives unless the embeddings are gathered across ranks.

sentence-transformers' losses that take ``gather_across_devices`` (MultipleNegativesRankingLoss
and its cached, symmetric, GIST and sparse/multi-vector kin) are watched once a script imported
them: which loss ran, and whether it gathers.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable

from .findings import Finding, fault, ok, skipped

_get_run: list[Callable[[], dict]] = []


def watch(get_run: Callable[[], dict], safe) -> None:
    """Patch the gathering-capable losses of the sentence-transformers modules imported so far."""
    if not _get_run:
        _get_run.append(get_run)
    for name, mod in list(sys.modules.items()):
        if not name.startswith("sentence_transformers") or ".losses" not in name or mod is None:
            continue
        for cls in list(vars(mod).values()):
            if isinstance(cls, type) and hasattr(cls, "compute_loss_from_embeddings") \
                    and not getattr(cls.compute_loss_from_embeddings, "_tuner_check", False) \
                    and "gather_across_devices" in inspect.signature(cls).parameters:
                cls.compute_loss_from_embeddings = _wrap(cls.compute_loss_from_embeddings, safe)


def _wrap(original, safe):
    def compute(self, *args, **kwargs):
        safe(_note)(self)
        return original(self, *args, **kwargs)

    compute._tuner_check = True  # type: ignore[attr-defined]
    return compute


def _note(loss) -> None:
    run = _get_run[0]()
    if "contrastive" not in run:
        run["contrastive"] = {"loss": type(loss).__name__, "gather": bool(getattr(loss, "gather_across_devices", False))}


def judge(runs: dict[int, dict], world: int) -> list[Finding]:
    seen = [(r, run["contrastive"]) for r, run in sorted(runs.items()) if run.get("contrastive")]
    if not seen:
        return [skipped("negatives", "all", "no contrastive loss with in-batch negatives ran")]
    r, c = seen[0]
    if world > 1 and not c["gather"]:
        return [fault("negatives", f"rank {r}", f"{c['loss']} takes its in-batch negatives from this rank's batch only "
                      f"(gather_across_devices=False) on {world} data-parallel ranks: each query sees 1/{world} of the "
                      "global batch's negatives, an easier task than the global batch size says",
                      f"{c['loss']}(model, gather_across_devices=True): the embeddings are gathered across ranks, with "
                      "gradients")]
    return [ok("negatives", "all", f"{c['loss']} gathers its negatives across ranks" if world > 1
               else f"{c['loss']} on one data-parallel rank")]
