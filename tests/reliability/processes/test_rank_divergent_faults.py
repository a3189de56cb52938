"""Issue 40 item 3: a rank-divergent failure never becomes a hang.

Ten faults injected on real gloo CPU ranks (`rank_faults.py`, a callback module given with
``--callback``): every rank exits within the bound, the launcher prints one cause naming the
machine, the rank and what it was doing, and the last complete checkpoint; the hangs leave
every rank's Python stack in ``OUTPUT/stacks/``; no process of the run is left behind. The runs
start a few at a time so that their waits overlap.
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
    "save_raise": (1, "rank 0 failed (exit code 1) on machine 0", "while saving checkpoint step-"),
    "disk_full": (1, "rank 1", "No space left on device"),
    "nan": (1, "from rank 1", "the loss is nan at step 3"),
    "out_of_data": (1, "rank 1 ", "on machine 0"),
    "sigkill": (1, "rank 1 failed (killed by signal SIGKILL) on machine 0", "while training step 3"),
    "sigstop": (1, "rank 1 on machine 0", "stopped responding"),
    "slow_validation": (1, "rank 0 on machine 0", "training step 3"),
    "partial_collective": (1, "rank", ""),
    "sigkill_machine1": (2, "rank 1", ""),
    "sigstop_machine1": (2, "rank 1 on machine 1", "stopped responding"),
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _leftovers(marker: str) -> list[str]:
    """Processes whose command line names `marker` (the run's folder): its launchers and ranks."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and int(pid) != os.getpid():
            found.append(f"{pid}: {cmd[:200]}")
    return found


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
        cmds = [["run", "settings.toml"]]
    else:
        c = subprocess.run([sys.executable, "-m", "tuner", "compile", "settings.toml", "-q"], cwd=d, env=env,
                           capture_output=True, text=True, timeout=120)
        assert c.returncode == 0, c.stderr
        cmds = [["run", str(d / "build"), "--machine-rank", str(m)] for m in range(machines)]
    procs = [subprocess.Popen([sys.executable, "-m", "tuner", *cmd, "--callback", "rank_faults:Fault"], cwd=d,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for cmd in cmds]
    out = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        out.append((p.returncode, err))
    ended = time.time()
    time.sleep(1)
    marked = d / "fault.time"
    return {"dir": d, "results": out, "took": ended - float(marked.read_text()) if marked.exists() else None,
            "left": _leftovers(str(d))}


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
        for code, err in r["results"]:
            summary = [line for line in err.splitlines() if line.startswith("tuner run: ")]
            text = "\n".join(summary)
            why = []
            if code in (0, None) or code < 0:
                why.append(f"exit {code}")
            if "Traceback" in "\n".join(summary):
                why.append("traceback in the cause")
            if not summary:
                why.append("no cause line")
            if "the run hung" in text:
                stacks = r["dir"] / "out" / "stacks"
                if not stacks.is_dir() or not list(stacks.glob("rank-*.txt")):
                    why.append("a hang without stacks")
            if why:
                problems.append((fault, why, err[-1500:]))
        if r["took"] is None or r["took"] > EXIT_BOUND_S:
            problems.append((fault, [f"took {r['took']} s from the fault to the end"], ""))
        if r["left"]:
            problems.append((fault, ["orphans"], r["left"]))
    report = {f: (round(r["took"] or -1, 1), [c for c, _ in r["results"]]) for f, r in got.items()}
    print("fault -> (seconds from the fault to the end, exit codes):", report)
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
