"""The one launcher behind `tuner run` and `tuner launch`: start this machine's ranks.

* GPUs: accelerate's own launcher with the compiled YAML
  (``accelerate launch --config_file build/accelerate.yaml [--module] ENTRY ...``).
* CPU only: ``accelerate launch`` would start independent single-process runs for an
  FSDP/DeepSpeed config (docs/cpu-distributed-facts.md), so real gloo ranks are started
  with torch's elastic launcher (what ``torchrun`` uses), each with the environment
  accelerate's launcher derives from the same YAML (`launch_env.accelerate_env`).

Which launcher, what a rank runs (tuner's own trainer, ``-m tuner.runtime.worker``, for
`tuner run`, or ``-m tuner.runtime.bootstrap`` around a person's script for `tuner launch`),
the ranks' environment and this machine's place in the job are the run plan's
(runtime/run_plan.py), decided before `launch` is called. Everything else is shared: rank
death, signals, exit codes and messages.

A rank that dies ends the run: the elastic agent notices within `MONITOR_INTERVAL_S`, stops
the others (SIGTERM, then SIGKILL after `STOP_GRACE_S`), and `launch` returns non-zero with
a message naming the rank. Ranks blocked in a collective also fail on their own after the
process-group timeout, and exit when their launcher disappears (`rank_guard`).

SIGINT (Ctrl-C) or SIGTERM to the launcher stops every rank of this machine; ranks leave
without a traceback (`rank_guard.quiet_signals`), the launcher prints one "interrupted" line
naming the last complete checkpoint it can see and exits 128 + the signal number.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..compiler.diagnostics import EXIT_OK, EXIT_RANK_FAILED, EXIT_USAGE
from . import knobs
from .artefacts import Artefacts
from .launch_env import Entry, Topology, accelerate_env, free_port, port_taken_message, rank_threads, use_gpu_launcher

if TYPE_CHECKING:
    from .run_plan import Launcher, RunPlan

__all__ = ["Entry", "Topology", "accelerate_env", "launch", "rank_threads", "use_gpu_launcher"]

MONITOR_INTERVAL_S = 0.5
STOP_GRACE_S = 10
#: Upper bound from a rank's death to `tuner run` exiting (monitor + grace + teardown slack).
DEATH_BOUND_S = MONITOR_INTERVAL_S + STOP_GRACE_S + 20


def launch(plan: RunPlan, arts: Artefacts) -> int:
    """Run every rank of this machine to the end, as `plan` says (runtime/run_plan.py: made, and
    any refusal said, before this is called); returns the command's exit status."""
    how, topo = plan.launcher, plan.topology
    assert how is not None and topo is not None and plan.refusal is None
    entry = how.entry
    with contextlib.chdir(how.cwd):
        if how.kind == "accelerate":
            return _launch_accelerate(arts, entry, list(how.accelerate))
        if how.note:
            print(how.note, file=sys.stderr)
        return _launch_cpu(arts, entry, topo, how)


def _launch_accelerate(arts: Artefacts, entry: Entry, cmd: list[str]) -> int:
    proc = subprocess.Popen(cmd)
    got: list[int] = []

    def forward(signum, _frame):  # accelerate's launcher stops its ranks on these
        got.append(signum)
        proc.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if got:
        return interrupted(arts, entry, got[0])
    if rc < 0:  # accelerate's launcher itself was killed (the OOM killer's SIGKILL): its ranks are gone
        print(f"{entry.command}: accelerate's launcher was killed by {signal.Signals(-rc).name}", file=sys.stderr)
        return EXIT_RANK_FAILED
    if rc and not (rc == EXIT_USAGE and entry.module == "tuner.runtime.worker"):
        return EXIT_RANK_FAILED  # a script's own status (3, 200) is named in the ranks' output, not passed on
    return rc


def _launch_cpu(arts: Artefacts, entry: Entry, topo: Topology, how: Launcher) -> int:
    if topo.num_machines > 1:  # every machine meets at the one port they all know
        return _launch_cpu_once(arts, entry, topo, how)
    # One machine: any free port will do (another run may hold the compiled one). Two runs
    # started at the same moment can both find the same port free and race for it; the loser
    # learns it before any rank starts and tries again on a port the system picks.
    for attempt in range(3):
        topo = replace(topo, main_port=free_port(topo.main_port if attempt == 0 else 0))
        try:
            return _launch_cpu_once(arts, entry, topo, how)
        except _PortRaced:
            print(f"{entry.command}: the rendezvous port {topo.main_port} was free when looked at and taken when "
                  f"bound (another program or run); starting the ranks on a port the system picks", file=sys.stderr,
                  flush=True)
    print(port_taken_message(entry.command, topo.main_port), file=sys.stderr)
    return EXIT_RANK_FAILED


class _PortRaced(Exception):
    """The rendezvous port was free when looked at and taken when bound."""


def _launch_cpu_once(arts: Artefacts, entry: Entry, topo: Topology, how: Launcher) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    os.environ.update(dict(how.env))  # the plan's: accelerate's derivation from the compiled YAML
    if topo.num_machines > 1:
        # Every machine must meet at the same address and port: no fallback port here.
        endpoint, run_id = f"{topo.main_address}:{topo.main_port}", topo.run_id
    else:
        endpoint, run_id = f"127.0.0.1:{topo.main_port}", f"tuner-{uuid.uuid4().hex[:8]}"
    config = launch_config(topo, how.nproc, endpoint, run_id)
    from .hang_watch import HangWatch

    watch = HangWatch(_ranks_output(arts)) if entry.module == "tuner.runtime.worker" else None
    try:
        with watch or contextlib.nullcontext():
            elastic_launch(config, sys.executable)("-m", entry.module, *entry.args)
    except ChildFailedError as exc:
        if watch is not None and watch.cause:
            return _report_hang(arts, entry, watch)
        return _report_failure(entry, exc, arts, watch, how.nproc)
    except SignalException as exc:
        return interrupted(arts, entry, int(exc.sigval))
    except KeyboardInterrupt:  # a Ctrl-C that landed before torch installed its handler
        return interrupted(arts, entry, int(signal.SIGINT))
    except Exception as exc:  # rendezvous errors: another machine never came, or left
        from torch.distributed.elastic.rendezvous.api import RendezvousError

        if isinstance(exc, RendezvousError) and "EADDRINUSE" in _causes(exc):  # taken since the check
            if topo.num_machines == 1:
                raise _PortRaced from exc
            print(port_taken_message(entry.command, topo.main_port), file=sys.stderr)
            return EXIT_RANK_FAILED
        if isinstance(exc, RendezvousError):
            print(f"{entry.command}: rendezvous at {endpoint} failed ({type(exc).__name__}: {exc}); "
                  f"every machine must run with the same build and reach machine 0 there", file=sys.stderr)
            return EXIT_RANK_FAILED
        raise
    return EXIT_OK


def _ranks_output(arts: Artefacts) -> Path:
    """Where the trainer's ranks write: the output directory, or in a `tuner check` rehearsal the
    check's temporary folder (runtime/check/observer.py's `redirect_output`)."""
    from .check.observer import DIR_ENV

    return Path(os.environ[DIR_ENV]) / "output" if os.environ.get(DIR_ENV) else arts.output_dir


def _causes(exc: BaseException | None) -> str:
    """The messages of an exception and its causes, one string."""
    text = ""
    while exc is not None and len(text) < 10_000:
        text += f" {exc}"
        exc = exc.__cause__ or exc.__context__
    return text


def launch_config(topo: Topology, nproc: int, endpoint: str, run_id: str):
    """torch's elastic launch configuration for this machine's ranks."""
    import dataclasses

    from torch.distributed.launcher.api import LaunchConfig

    # The grace between SIGTERM and SIGKILL when the run stops (a rank died, Ctrl-C): a
    # LaunchConfig field since torch 2.10 (`shutdown_timeout`, default 30 s); older torch
    # read a module constant.
    if "shutdown_timeout" in {f.name for f in dataclasses.fields(LaunchConfig)}:
        grace = {"shutdown_timeout": STOP_GRACE_S}
    else:  # pragma: no cover - torch < 2.10
        import torch.distributed.launcher.api as api

        api._DEFAULT_STOP_TIMEOUT, grace = STOP_GRACE_S, {}
    return LaunchConfig(
        min_nodes=topo.num_machines, max_nodes=topo.num_machines, nproc_per_node=nproc, run_id=run_id,
        rdzv_backend="c10d", rdzv_endpoint=endpoint,
        # Machine 0 hosts the rendezvous store; the others only connect (on one host, as in
        # the tests, torch's hostname heuristic would make every machine try to host it).
        rdzv_configs={"timeout": knobs.rdzv_timeout_s(), "is_host": topo.machine_rank == 0},
        max_restarts=0, monitor_interval=MONITOR_INTERVAL_S, start_method="spawn", **grace,
    )


def interrupted(arts: Artefacts, entry: Entry, signum: int) -> int:
    """One line on Ctrl-C/SIGTERM; the exit status a shell gives a process killed by it."""
    name = signal.Signals(signum).name
    line = f"{entry.command}: interrupted ({name})"
    if entry.checkpoints:
        from .checkpoint import checkpoints_dir, latest_checkpoint

        last = latest_checkpoint(checkpoints_dir(arts.output_dir))
        line += (f"; last complete checkpoint: {last} (continue with --resume {last})" if last
                 else "; no complete checkpoint was written")
    print(line, file=sys.stderr, flush=True)
    return 128 + signum


def last_checkpoint_words(arts: Artefacts) -> str:
    from .checkpoint import checkpoints_dir, latest_checkpoint

    last = latest_checkpoint(checkpoints_dir(arts.output_dir))
    return f"last complete checkpoint: {last} (continue with --resume latest)" if last else \
        "no complete checkpoint was written"


def _report_hang(arts: Artefacts, entry: Entry, watch) -> int:
    stacks = f"; every rank's Python stack: {watch.stacks}" if watch.stacks else ""
    print(f"{entry.command}: the run hung: {watch.cause}; every rank was stopped (bound {watch.bound:.0f} s, "
          f"TUNER_HANG_S); {last_checkpoint_words(arts)}{stacks}", file=sys.stderr, flush=True)
    return EXIT_RANK_FAILED


def _report_person_error(entry: Entry, arts: Artefacts | None, ranks: dict[int, dict], divergent: bool) -> int:
    """A rank stopped on the person's error (its data, the build, a full disk), not a crash: exit 2.
    The rank said why (each machine's local rank 0 prints; another rank's error is read from its
    report and said here); where only some ranks met it, the others were stopped: the last
    complete checkpoint is named, as for any rank that ends the run."""
    from .hang_watch import unsaid_errors

    for line in unsaid_errors(ranks):
        print(f"{entry.command}: {line}", file=sys.stderr)
    if divergent and arts is not None and entry.checkpoints:
        print(f"{entry.command}: the run was stopped on every rank; {last_checkpoint_words(arts)}", file=sys.stderr)
    return EXIT_USAGE


def _report_failure(entry: Entry, exc, arts: Artefacts | None = None, watch=None, nproc: int = 0) -> int:
    from .hang_watch import read_ranks

    failures = exc.failures or {}
    if not failures:
        print(f"{entry.command}: a rank failed", file=sys.stderr)
        return EXIT_RANK_FAILED
    first_rank, first = min(failures.items(), key=lambda kv: kv[1].timestamp)
    codes = sorted({f.exitcode for f in failures.values()})
    # A rank that met the person's error exits 2 after recording it; a peer of it can fail first
    # (its collective broken by that exit) and be the failure the agent notices: the record decides.
    ranks = read_ranks(watch.output_dir, watch.started) if watch is not None else {}
    if entry.module == "tuner.runtime.worker" and (any(f.exitcode == EXIT_USAGE for f in failures.values())
                                                   or any(rep.get("error") for rep in ranks.values())):
        return _report_person_error(entry, arts, ranks, divergent=len(codes) > 1 or len(failures) < nproc)
    desc = f"killed by signal {first.signal_name()}" if first.exitcode < 0 else f"exit code {first.exitcode}"
    where, last = "", ""
    if watch is not None and arts is not None:
        rep = watch.ranks.get(first_rank) or {}
        where = f" on machine {rep.get('machine', 0)} ({rep.get('host')}) while {rep.get('what')}" if rep else ""
        last = f"; {last_checkpoint_words(arts)}"
    print(f"{entry.command}: rank {first_rank} failed ({desc}){where}; the run was stopped on every rank "
          f"(exit codes {codes}){last}. See the rank's output above.", file=sys.stderr)
    # Always 1: a script's own code (3, 200) is named above, not passed on, so that 2, 130 and
    # 143 keep their documented meaning (README, docs/launch.md).
    return EXIT_RANK_FAILED
