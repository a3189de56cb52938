"""Every rank resumes the same checkpoint, or no rank trains (issue 40).

Each rank finds the checkpoint it resumes in its own view of the output folder. Two machines
can see different ones: a save that is complete on machine 0's disk and a leftover partial one
(``.tmp-step-N``, never published) on machine 1's, when the machines do not share the folder, or
a shared file system that has not yet shown one machine another's newest save. A rank that
resumed another step than the others would train on silently or wait in a collective the others
never call. So before any rank loads a state, the ranks compare what they found (one
``all_gather_object`` of a few names) and, when they differ or one of them cannot resume, every
rank stops at once with one message naming each rank's view and the last checkpoint complete on
every rank.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import checkpoint as ckpt
from .artefacts import RunError


def agreed(resolve: Callable[[], Path | None], ckdir: Path) -> Path | None:
    """`resolve()` (this rank's checkpoint to resume, or None), once every rank found the same
    one; RunError (the same on every rank) otherwise."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return resolve()
    from . import rank_guard

    rank_guard.doing("comparing the checkpoint to resume with the other ranks")  # for the hang watch
    view = own_view(resolve, ckdir)
    views: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(views, view)
    problem = disagreement(views)
    if problem:
        raise RunError(problem)
    return Path(view["path"]) if view["path"] else None


def own_view(resolve: Callable[[], Path | None], ckdir: Path) -> dict[str, Any]:
    """What this rank would resume, the error that stops it, and the checkpoints it sees complete."""
    view: dict[str, Any] = {
        "rank": int(os.environ.get("RANK", "0")),
        "machine": int(os.environ.get("GROUP_RANK", os.environ.get("MACHINE_RANK", "0")) or 0),
        "host": socket.gethostname(), "path": None, "error": None, "ckdir": str(ckdir),
        "complete": [p.name for _, p in ckpt.complete_checkpoints(Path(ckdir))],
    }
    try:
        found = resolve()
    except RunError as exc:
        view["error"] = exc.message
    else:
        view["path"] = str(found) if found is not None else None
    return view


def _who(ranks: list[dict[str, Any]]) -> str:
    shown = ", ".join(f"rank {v['rank']} on machine {v['machine']} ({v['host']})" for v in ranks[:4])
    return shown + (f" and {len(ranks) - 4} more" if len(ranks) > 4 else "")


def disagreement(views: list[dict[str, Any]]) -> str | None:
    """None when every rank resumes the same checkpoint (by name: machines may mount the folder
    at different paths); else the message every rank stops with."""
    failed = [v for v in views if v["error"]]
    if failed and len({v["error"] for v in failed}) == 1 and len(failed) == len(views):
        return failed[0]["error"]  # every rank's own view says the same: the usual message
    if failed:
        others = [v for v in views if not v["error"]]
        return (f"{_who(failed)} cannot resume: {failed[0]['error']}; every rank was stopped before training "
                f"({_who(others)} would resume {_name(others[0])})" if others else
                f"{_who(failed)} cannot resume: {failed[0]['error']}; every rank was stopped before training")
    groups: dict[str, list[dict[str, Any]]] = {}
    for v in views:
        groups.setdefault(_name(v), []).append(v)
    if len(groups) == 1:
        return None
    seen = "; ".join(f"{_who(vs)} would resume {name}" for name, vs in groups.items())
    return (f"the ranks do not see the same checkpoint to resume: {seen} (a save complete on some machines only: a "
            f"leftover partial checkpoint, or an output folder the machines do not share). Every rank was stopped "
            f"before training; {_common(views)}")


def _name(view: dict[str, Any]) -> str:
    return Path(view["path"]).name if view["path"] else "nothing (no checkpoint)"


def _common(views: list[dict[str, Any]]) -> str:
    """The last complete checkpoint every rank sees, and how to resume it."""
    shared = set(views[0]["complete"]).intersection(*(v["complete"] for v in views[1:]))
    if not shared:
        return ("no complete checkpoint is seen by every rank: give every machine the same output folder "
                "(a shared file system), or start without --resume in a new output.dir")
    last = max(shared, key=lambda n: int(n.rsplit("-", 1)[1]))
    where = Path(views[0]["ckdir"]) / last
    return (f"the last complete checkpoint every rank sees is {last} ({where}): resume it on every machine with "
            f"`tuner run BUILD_DIR --resume {where}`, or give the machines one shared output folder")
