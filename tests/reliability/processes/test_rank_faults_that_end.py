"""Issue 40 item 3, the faults that end a rank (an exception, a full disk, a NaN, one rank out
of data, a bad row only one rank reads, a killed rank, a collective only some ranks call): every rank exits within the bound
with one named cause and the last complete checkpoint, no orphan (fault_runs.py says how). The
killed rank's run is FSDP2 and held to the launcher's death bound (31 s) from the kill. The
hangs and the faults across two launchers: test_rank_faults_that_hang.py (pytest's other
worker runs it beside this one)."""

from __future__ import annotations

import pytest

from tests.reliability.processes.fault_runs import problems_of, run_faults

pytestmark = pytest.mark.slow  # starts tuner processes (and ranks)

JOBS = [("sigkill",), ("save_raise",), ("disk_full",), ("nan",), ("out_of_data", "data_error"), ("partial_collective",)]


def test_faults_that_end_a_rank_end_the_run_within_the_bound(tmp_path):
    got = run_faults(tmp_path, JOBS)
    problems = problems_of(got)
    assert not problems, problems
