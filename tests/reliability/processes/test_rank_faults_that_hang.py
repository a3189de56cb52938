"""Issue 40 item 3, the faults that hang a rank (SIGSTOP, validation on rank 0 only longer than
the bound, a deadlock in the person's code) and the faults on two launchers on 127.0.0.1 across
"machines" (a rank killed on machine 1, a rank stopped on machine 1, a leftover partial
checkpoint seen by one machine only): every rank exits within the bound with one named cause and
the last complete checkpoint, no orphan, and the hang watch stops the hangs leaving every rank's
stack (fault_runs.py says how). The partial checkpoint's layout is the killed-on-machine-1 run's
folder (killed at step 5, after checkpoint step-4). The faults that end a rank:
test_rank_faults_that_end.py."""

from __future__ import annotations

import os
import socket

import pytest

from tests.reliability.processes.fault_runs import problems_of, run_faults

JOBS = [("sigkill_machine1", "partial_checkpoint"), ("sigstop",), ("slow_validation",), ("deadlock",),
        ("sigstop_machine1",)]


@pytest.mark.slow  # starts tuner processes (and ranks)
def test_hangs_and_faults_across_machines_end_within_the_bound(tmp_path):
    got = run_faults(tmp_path, JOBS)
    problems = problems_of(got)
    assert not problems, problems


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
