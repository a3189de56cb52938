"""Carry out a run plan (runtime/run_plan.py) that was not refused: what the plan decided, done
in order, then the ranks started. Nothing here decides; each step does what the plan says.

`tuner run`: the universal conversion of the checkpoint the ranks resume, the stale NVMe swap
folders removed, the run's own copy of its build written with the ranks' plan beside it
(runtime/run_build.py: written last, so a refused run never replaces an earlier run's), then
the launch. `tuner launch` and `tuner check`'s rehearsal only launch (with the plan written
where the ranks read it).
"""

from __future__ import annotations

import sys
from pathlib import Path

from .artefacts import Artefacts, RunError
from .run_plan import PLAN_FILE, RunPlan


def show(plan: RunPlan) -> None:
    """The plan's lines before anything is carried out: the data check's summary, the notes."""
    if plan.data_line:
        print(plan.data_line, flush=True)
    for note in plan.notes:
        print(note, file=sys.stderr, flush=True)


def run(plan: RunPlan, arts: Artefacts, files: dict[str, bytes]) -> int:
    """`tuner run`: `arts` is the staged build the plan was made from, `files` its bytes."""
    from .launch import launch

    _convert(plan, arts)
    _clear_offload(plan)
    return launch(plan, _freeze(plan, files, arts.output_dir))


def _convert(plan: RunPlan, arts: Artefacts) -> None:
    r = plan.ranks.resume
    if not r.convert:
        return
    from . import checkpoint as ckpt
    from .checkpoint_convert import to_universal

    meta = ckpt.read_meta(Path(r.chosen))
    print(f"converting {r.chosen} ({meta.strategy}, {meta.world_size} ranks) to DeepSpeed's universal checkpoint "
          f"for {arts.plan.world_size} ranks: {r.checkpoint}", flush=True)
    to_universal(Path(r.chosen), Path(r.checkpoint))


def _clear_offload(plan: RunPlan) -> None:
    """Before a DeepSpeed run: remove swap folders earlier runs left in the NVMe path."""
    from .maintenance import clear_offload_cache

    for p in plan.nvme_clear:
        for gone in clear_offload_cache(p):
            print(f"removed stale DeepSpeed swap folder {gone}", file=sys.stderr)


def _freeze(plan: RunPlan, files: dict[str, bytes], output_dir: Path) -> Artefacts:
    """From here the run reads only its own copy of the build (and its plan), beside the lock."""
    from . import run_build

    assert plan.topology is not None
    machine = plan.topology.machine_rank if plan.topology.num_machines > 1 else None
    try:
        arts = run_build.freeze({**files, PLAN_FILE: plan.ranks.to_json().encode("utf-8")}, output_dir, machine)
    except OSError as exc:
        from ..compiler.read.files import describe_os_error

        raise RunError(f"cannot write the run's copy of its build into {output_dir}: {describe_os_error(exc)}; "
                       "free space there or set output.dir to a writable directory") from None
    assert str(arts.build_dir) == str(Path(plan.build_dir).resolve()), (arts.build_dir, plan.build_dir)
    return arts


def write_rank_plan(plan: RunPlan) -> None:
    """Where the plan puts it (`tuner check`'s folder): the ranks' part, for tuner's trainer."""
    if plan.trains and plan.plan_file:
        Path(plan.plan_file).write_text(plan.ranks.to_json(), encoding="utf-8")
