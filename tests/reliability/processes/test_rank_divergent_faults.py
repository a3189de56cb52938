"""Issue 40 item 3: a rank-divergent failure never becomes a hang.

Eleven of the issue's twelve faults (the twelfth, a port stolen between check and bind, is
tests/launch/test_launch_units.py's `test_one_machine_launch_that_loses_its_port_to_a_race_tries_another`)
and a deadlock in the person's code, injected on real gloo CPU ranks (`rank_faults.py`, a callback
module given with ``--callback``; the partial checkpoint laid out by a real run first): every rank
exits within the bound (each rank's exit is timed from /proc), each launcher prints the cause
naming the machine, the rank and what it was doing, and the last complete checkpoint; the hangs
are stopped by the hang watch and leave every rank's Python stack in ``OUTPUT/stacks/``, one
showing the fault's frame; no process of the run is left behind. The runs start a few at a time
so that their waits overlap.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.reliability.conftest import run_env
from tests.reliability.processes.processes import RankClock, leftovers

pytestmark = pytest.mark.slow  # starts tuner processes (and ranks)

HERE = Path(__file__).resolve().parent
HANG_S = 15
#: From the fault to the last launcher's exit: the issue's 60 s (the watch's bound, its poll, the
#: stacks, the agent's stop: SIGTERM, then SIGKILL after 10 s). Measured on the shared 2-core
#: machine at a load average of ~17: 9-50 s.
EXIT_BOUND_S = 60

ONE = """\
[model]
family = "causal_lm"
path = "builtin:micro-llama"
[hardware]
platform = "cpu"
num_processes = 2
{machines}
[data]
seq_len = 16
[training]
micro_batch_size = 1
max_steps = 8
log_every = 1
[checkpoint]
every_steps = 2
export = false
[output]
dir = "out"
"""
#: fault -> (machines, the cause's words, whether it is a hang the watch stops)
FAULTS = {
    # rank 0's exit after its exception can outlast the watch's bound on a loaded machine (its
    # process group's teardown): then the watch reports it ("rank 0 on machine 0 ... was saving
    # checkpoint step-2"), else the agent ("rank 0 failed (exit code 1) on machine 0 ... while saving")
    "save_raise": (1, "rank 0 ", "saving checkpoint step-"),
    "disk_full": (1, "rank 1", "No space left on device"),
    "nan": (1, "from rank 1", "the loss is nan at step 3"),
    "out_of_data": (1, "rank 1 ", "on machine 0"),
    "sigkill": (1, "rank 1 failed (killed by signal SIGKILL) on machine 0", "while training step 3"),
    "sigstop": (1, "rank 1 on machine 0", "stopped responding"),
    "slow_validation": (1, "rank 0 on machine 0", "training step 3"),
    "partial_collective": (1, "rank", ""),
    "sigkill_machine1": (2, "rank 1", ""),
    "sigstop_machine1": (2, "rank 1 on machine 1", "stopped responding"),
    "deadlock": (1, "rank 1 on machine 0", "training step 3"),
    "partial_checkpoint": (2, "rank 1 on machine 1 (", "the last complete checkpoint every rank sees is step-2"),
}
#: The faults that hang a rank rather than end it: the hang watch must stop them and save stacks.
#: (A collective only rank 0 calls meets rank 1's next gradient all-reduce, and gloo aborts on the
#: size mismatch: measured, rank 1 ends by SIGABRT within a second. Should it hang, it is held to
#: the same: "the run hung" with every rank's stack.)
HANGS = {"sigstop", "slow_validation", "sigstop_machine1", "deadlock"}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(d: Path, env: dict, cmds: list[tuple[Path, list[str]]]) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-m", "tuner", *cmd, "--callback", "rank_faults:Fault"], cwd=cwd,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for cwd, cmd in cmds]


def _wait(procs: list[subprocess.Popen], clock: RankClock | None = None, limit: float = 600) -> list[tuple]:
    """(exit code, stderr, when it exited) of each launcher; the clock polled meanwhile."""
    import threading

    errs: dict[int, str] = {}
    readers = [threading.Thread(target=lambda i, p: errs.__setitem__(i, p.communicate()[1]), args=(i, p), daemon=True)
               for i, p in enumerate(procs)]
    for t in readers:
        t.start()
    ended: dict[int, float] = {}
    deadline = time.time() + limit
    while len(ended) < len(procs) and time.time() < deadline:
        if clock is not None:
            clock.poll()
        for i, p in enumerate(procs):
            if i not in ended and p.poll() is not None:
                ended[i] = time.time()
        time.sleep(0.2)
    for i, p in enumerate(procs):
        if i not in ended:
            p.kill()
            ended[i] = time.time()
    for t in readers:
        t.join(60)
    return [(p.returncode, errs.get(i, ""), ended[i]) for i, p in enumerate(procs)]


def _partial_checkpoint_layout(d: Path, env: dict) -> list[tuple[Path, list[str]]]:
    """Machine 0's disk (`d`) holds checkpoints step-2 and step-4; machine 1's (`d/m1`, a copy of
    the project) holds step-2 and, of step-4, a leftover partial save (`.tmp-step-4`, no record):
    a two-machine run without a shared output folder, or one whose save of step 4 machine 1 never
    saw. Laid out by a real 4-step two-machine run, then resumed with `--resume latest`."""
    port = _port()
    first = _wait(_start(d, env, [(d, ["run", str(d / "build"), "--machine-rank", str(m), "--max-steps", "4",
                                       "--main-port", str(port)]) for m in range(2)]))
    assert all(code == 0 for code, _, _ in first), [err[-2000:] for _, err, _ in first]
    m1 = d / "m1"
    m1.mkdir()
    for name in ("settings.toml", "rank_faults.py"):
        shutil.copy(d / name, m1 / name)
    shutil.copytree(d / "build", m1 / "build")
    shutil.copytree(d / "out", m1 / "out")
    ck = m1 / "out" / "checkpoints"
    (ck / "step-4").rename(ck / ".tmp-step-4")
    (ck / ".tmp-step-4" / "tuner_checkpoint.json").unlink()
    (ck / "latest").write_text("step-2")
    port = _port()
    return [(where, ["run", str(where / "build"), "--machine-rank", str(m), "--resume", "latest",
                     "--main-port", str(port)]) for m, where in enumerate((d, m1))]


def _run_fault(root: Path, fault: str) -> dict:
    machines = FAULTS[fault][0]
    d = root / fault
    d.mkdir()
    shutil.copy(HERE / "rank_faults.py", d / "rank_faults.py")
    extra = "" if machines == 1 else (f"num_machines = 2\nmain_process_ip = \"127.0.0.1\"\n"
                                      f"main_process_port = {_port()}")
    (d / "settings.toml").write_text(ONE.format(machines=extra), encoding="utf-8")
    env = {**run_env(), "TUNER_HANG_S": str(HANG_S), "TUNER_TEST_FAULT": fault, "TUNER_PG_TIMEOUT": "300"}
    if machines == 1:
        cmds = [(d, ["run", "settings.toml"])]
    else:
        c = subprocess.run([sys.executable, "-m", "tuner", "compile", "settings.toml", "-q"], cwd=d, env=env,
                           capture_output=True, text=True, timeout=120)
        assert c.returncode == 0, c.stderr
        cmds = [(d, ["run", str(d / "build"), "--machine-rank", str(m)]) for m in range(machines)]
    if fault == "partial_checkpoint":
        cmds = _partial_checkpoint_layout(d, env)
    clock = RankClock(str(d))
    out = _wait(_start(d, env, cmds), clock)
    time.sleep(1)
    marked = d / "fault.time"
    at = float(marked.read_text()) if marked.exists() else None
    if fault == "partial_checkpoint":  # there before the run: met when the ranks compare what they resume
        at = _resume_started(d / "out")
    return {"dir": d, "results": [(code, err) for code, err, _ in out],
            "took": max(t for _, _, t in out) - at if at else None,
            "launchers": [round(t - at, 1) for _, _, t in out] if at else None,
            "ranks": clock.exits(at) if at else {}, "left": leftovers(str(d))}


def _resume_started(out: Path) -> float | None:
    """When rank 0 began comparing its checkpoint with the others' (its last state, in the run's
    OUTPUT/.tuner-ranks/rank-0.json), if that is the last thing it did."""
    import json

    try:
        state = json.loads((out / ".tuner-ranks" / "rank-0.json").read_text())
    except (OSError, ValueError):
        return None
    return float(state["since"]) if state.get("what", "").startswith("comparing the checkpoint") else None


def _stack_problems(fault: str, r: dict, said: str) -> list[str]:
    """A hang is stopped by the watch ("the run hung") and leaves every rank's Python stack,
    one of which shows the fault's own frame (rank_faults.py)."""
    if fault not in HANGS and "the run hung" not in said:
        return []
    if "the run hung" not in said:
        return ["a hang not stopped by the hang watch"]
    stacks = r["dir"] / "out" / "stacks"
    files = sorted(stacks.glob("rank-*.txt")) if stacks.is_dir() else []
    why = [] if {f.name for f in files} == {"rank-0.txt", "rank-1.txt"} else [f"stacks: {[f.name for f in files]}"]
    # the frame, where the hang is the person's own code (a stopped rank's dump was once cut short
    # after its first threads, at a load of 3.7: docs/reliability.md)
    if fault in ("slow_validation", "deadlock", "sigstop") and not any("rank_faults.py" in f.read_text(errors="replace")
                                                             for f in files):
        why.append("no stack shows the fault's frame (rank_faults.py)")
    return why


def test_rank_divergent_faults_end_within_the_bound(tmp_path):
    with ThreadPoolExecutor(max_workers=3) as pool:
        got = dict(zip(FAULTS, pool.map(lambda f: _run_fault(tmp_path, f), FAULTS), strict=True))
    problems = []
    for fault, r in got.items():
        _, who, words = FAULTS[fault]
        said = "\n".join(line for _, err in r["results"] for line in err.splitlines() if line.startswith("tuner run: "))
        if who not in said or words not in said:
            problems.append((fault, [f"the cause does not name {who!r} / {words!r}"], said))
        if "ast complete checkpoint" not in said and "no complete checkpoint" not in said:
            problems.append((fault, ["no last checkpoint named"], said))
        why = _stack_problems(fault, r, said)
        if why:
            problems.append((fault, why, said))
        for code, err in r["results"]:
            summary = [line for line in err.splitlines() if line.startswith("tuner run: ")]
            why = []
            if code in (0, None) or code < 0:
                why.append(f"exit {code}")
            if "Traceback" in "\n".join(summary):
                why.append("traceback in the cause")
            if not summary:
                why.append("no cause line")
            if why:
                problems.append((fault, why, err[-1500:]))
        if r["took"] is None or r["took"] > EXIT_BOUND_S:
            problems.append((fault, [f"took {r['took']} s from the fault to the end"], ""))
        if not r["ranks"] or len(r["ranks"]) != 2 or max(r["ranks"].values()) > EXIT_BOUND_S:
            problems.append((fault, [f"each rank's exit (s after the fault): {r['ranks']}"], ""))
        if r["left"]:
            problems.append((fault, ["orphans"], r["left"]))
    report = {f: (round(r["took"] or -1, 1), r["launchers"], r["ranks"], [c for c, _ in r["results"]])
              for f, r in got.items()}
    print("fault -> (s from the fault to the last launcher's exit, each launcher's, each rank's, exit codes):")
    for f, line in report.items():
        print(f"  {f}: {line}")
    for fault, why, text in problems:
        print(f"PROBLEM {fault}: {why}\n    {text!s:.1500}")
    assert not problems, (problems, report)


def test_the_watch_names_the_rank_the_others_wait_for():
    """The rules in-process: same state, no hang; different states past the bound, the rank not in
    a training step (else the one behind); a live rank without a heartbeat, stopped."""
    from tuner.runtime.hang_watch import culprit

    now, me = 1000.0, os.getpid()
    host = socket.gethostname()

    def rank(r, what, since, beat=now):
        return {"rank": r, "machine": 0, "host": host, "pid": me, "what": what, "since": since, "beat": beat}

    same = {0: rank(0, "training step 3", 900), 1: rank(1, "training step 3", 900)}
    assert culprit(same, now, 15) is None
    recent = {0: rank(0, "validation at step 3", 990), 1: rank(1, "training step 4", 990)}
    assert culprit(recent, now, 15) is None  # diverged 10 s < 15 s
    diverged = {0: rank(0, "training step 4", 950), 1: rank(1, "finishing (final validation and export)", 960)}
    assert culprit(diverged, now, 15).startswith("rank 1 on machine 0"), culprit(diverged, now, 15)
    behind = {0: rank(0, "training step 3", 900), 1: rank(1, "training step 4", 950)}
    assert culprit(behind, now, 15).startswith("rank 0 "), culprit(behind, now, 15)
    silent = {0: rank(0, "training step 3", 900), 1: rank(1, "training step 3", 900, beat=950)}
    assert "rank 1 " in culprit(silent, now, 15) and "stopped responding" in culprit(silent, now, 15)
    gone = {0: rank(0, "training step 3", 900), 1: {**rank(1, "training step 3", 900, beat=950), "pid": 2 ** 22 + 7}}
    assert culprit(gone, now, 15) is None  # a rank that exited is the elastic agent's to report
