"""`tuner check` end to end on this machine: launch checks, then the rehearsal, one report.

`check(build_dir, target, ...)` returns a `Report`. The launch part runs on every machine
(each one started with its ``--machine-rank``, as for `tuner launch`) and the machines
exchange their facts at machine 0's address and port; if any machine has a fault, every
machine stops there (nobody waits at a rendezvous the others will not join). Otherwise the
rehearsal starts this machine's ranks through the same launcher as `tuner launch` /
`tuner run`, with the observer installed (``$TUNER_CHECK_DIR``), for a few optimizer
steps, and judges what the local ranks saw.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from . import preflight
from .findings import Report, fault

if TYPE_CHECKING:
    from ..artefacts import Artefacts
    from ..run_plan import Options

#: Optimizer steps the rehearsal runs (then the ranks stop). Not fewer: DeepSpeed's WarmupLR
#: runs the first two steps at lr 0 (the zero2_offload example), and a step at lr 0 proves
#: nothing about `lr` or `params-change`.
STEPS = int(os.environ.get("TUNER_CHECK_STEPS", "3"))


def launch_part(build_dir: Path, target: list[str] | None, machine_rank: int | None, main_address: str | None,
                main_port: int | None, report: Report):
    """The launch checks on this machine (and the exchange); returns the loaded build or None."""
    from ..artefacts import RunError, load
    from . import exchange

    t0 = time.monotonic()
    try:
        arts = load(build_dir)
    except RunError:
        arts = None
    topo = None
    if arts is not None:
        from ..launch_env import Topology

        topo = Topology.resolve(arts, machine_rank, main_address, main_port)  # RunError: bad input (exit 2)
    m = topo.machine_rank if topo else (machine_rank or 0)
    facts = preflight.machine_facts(build_dir, target, m)
    facts["findings"] = [f.__dict__ for f in preflight.local_findings(facts, arts)]
    if topo is not None and topo.num_machines > 1:
        if topo.machine_rank == 0:
            all_facts, met = exchange.serve(topo.main_address, topo.main_port, facts, topo.num_machines)
        else:
            all_facts, met = exchange.join(topo.main_address, topo.main_port, facts)
        from .findings import Finding

        for f in sorted(all_facts, key=lambda x: x.get("machine", 0)):
            report.add([Finding(**x) for x in f.get("findings", [])])
        report.add(met)
        report.add(preflight.cross_findings(sorted(all_facts, key=lambda x: x.get("machine", 0))))
    else:
        from .findings import Finding, skipped

        report.add([Finding(**x) for x in facts["findings"]])
        if topo is not None:
            report.add([skipped("port", "machine 0", "one machine: the launcher picks a free port")])
    report.timings["launch checks"] = round(time.monotonic() - t0, 2)
    return arts, topo


def rehearse(arts: Artefacts, opts: Options, report: Report, quiet_stdout: bool) -> None:
    """The ranks started as the run plan says (runtime/run_plan.py, the plan `tuner run` and
    `tuner launch` make), under the observer; a refusal of the plan is the check's (exit 2)."""
    from ..artefacts import RunError
    from ..launch import launch
    from ..run_execute import write_rank_plan
    from ..run_plan import make_plan
    from .analyse import analyse, read_facts
    from .observer import DIR_ENV, STEPS_ENV

    t0, wall0 = time.monotonic(), time.time()
    target = list(opts.target) or None
    with tempfile.TemporaryDirectory(prefix="tuner-check-") as d, make_plan(arts, opts, Path(d)) as plan:
        if plan.refusal:
            raise RunError(plan.refusal.message, plan.refusal.exit_code)
        assert plan.topology is not None
        ppm = max(1, int(arts.plan.processes_per_machine))
        ranks = list(range(plan.topology.machine_rank * ppm, (plan.topology.machine_rank + 1) * ppm))
        write_rank_plan(plan)
        saved = {k: os.environ.get(k) for k in (DIR_ENV, STEPS_ENV)}
        os.environ[DIR_ENV], os.environ[STEPS_ENV] = d, str(STEPS)
        try:
            with _stdout_to_stderr(quiet_stdout):
                rc = launch(plan, arts)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        wall1 = time.time()
        facts = read_facts(Path(d), ranks)
    report.timings.update(phases(facts, wall0, wall1))
    findings = analyse(arts, facts, ranks, own_trainer=not target)
    report.timings["rehearsal: judging"] = round(time.time() - wall1, 2)
    named = any(f.check == "rehearsal" or (f.check == "collectives" and f.status == "fault") for f in findings)
    if rc not in (0, None) and not named:
        findings.append(fault("rehearsal", f"machine {plan.topology.machine_rank}", f"the ranks exited with status {rc}",
                              "see the ranks' output above"))
    report.add(findings)
    report.timings["rehearsal"] = round(time.monotonic() - t0, 2)


#: The rehearsal's phases, between the observer's marks (observer._mark) on the slowest rank.
PHASES = (("ranks start", "launch", "process"), ("imports", "process", "observer"),
          ("to Accelerator", "observer", "accelerator"), ("model build", "accelerator", "prepare"),
          ("prepare", "prepare", "prepared"), ("step 1", "prepared", "step 1"), ("later steps", "step 1", "write"),
          ("teardown", "write", "end"))


def phases(facts: dict[int, dict], start: float, end: float) -> dict[str, float]:
    """Seconds per phase of the rehearsal (where its time goes), from the ranks' marks."""
    out: dict[str, float] = {}
    marks = [{"launch": start, "end": end, **{k: v for k, v in f.get("marks", {}).items() if v}} for f in facts.values()]
    for name, a, b in PHASES:
        got = [m[b] - m[a] for m in marks if a in m and b in m]
        if got:
            out[f"rehearsal: {name}"] = round(max(got), 2)
    return out


@contextlib.contextmanager
def _stdout_to_stderr(on: bool):
    """With --json, stdout carries the report only: the ranks' output goes to stderr."""
    if not on:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def check(build_dir: Path, target: list[str] | None, machine_rank: int | None = None, main_address: str | None = None,
          main_port: int | None = None, skip: frozenset[str] = frozenset(), launch_only: bool = False,
          quiet_stdout: bool = False) -> Report:
    from ..run_plan import CHECK, Options

    report = Report(skip=skip)
    arts, _ = launch_part(build_dir, target, machine_rank, main_address, main_port, report)
    if report.faults or arts is None or launch_only:
        return report
    rehearse(arts, Options(CHECK, tuple(target or ()), machine_rank=machine_rank, main_address=main_address,
                           main_port=main_port), report, quiet_stdout)
    return report
