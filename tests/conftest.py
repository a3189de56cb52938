"""Shared fixtures. Each area has its own folder: compiler/, runtime/, services/, tui/, families/."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
# Third-party inputs, copied into the repository with their provenance (tests/data/README.md).
PEER_CONFIGS = REPO / "tests" / "data" / "peer-configs"
SEEDS = REPO / "tests" / "data" / "seeds"


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch):
    """Keep tests away from the real user's caches and config (and from each other)."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("TUNER_CACHE_DIR", str(home / "cache"))
    monkeypatch.setenv("TUNER_CONFIG_DIR", str(home / "config"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def run_tuner(*args: str, cwd: Path | None = None, timeout: float = 120, env: dict | None = None,
              input: str | None = None) -> subprocess.CompletedProcess:
    """Run the real `tuner` command line in a subprocess (as a user would): tests/harness.py."""
    from tests import harness

    return harness.tuner(*args, cwd=cwd, timeout=timeout, env=env, input=input)


# --- Two workers (pytest-xdist; scripts/test.sh passes -n and --dist loadgroup) -------------
# The tests of one file share module-scoped runs (a 2-rank launch each), and the files of the
# folders below share session-scoped runs: each such unit goes to one worker whole. Units
# start longest first, by the times recorded in tests/durations.json (scripts/
# record_durations.py writes it from a full run's --junitxml), so that no long file is left
# for the end; a unit not recorded there counts as UNRECORDED_S.
SHARED_FOLDERS = {"tests/reliability"}  # finished_run and finished_fsdp_run (conftest.py there)
UNRECORDED_S = 30.0


def group_of(nodeid: str) -> str:
    """The unit a test runs in: its folder where the folder shares runs, else its file."""
    path = nodeid.split("::", 1)[0]
    folder = path.rsplit("/", 1)[0]
    return folder if folder in SHARED_FOLDERS else path


def _rank_free_first() -> bool:
    """Units that start no rank first (scripts/test.sh asks while DeepSpeed's ops build beside them)."""
    return bool(os.environ.get("TUNER_TEST_RANKS_LAST"))


# tryfirst: xdist's worker reads the xdist_group marks in its own pytest_collection_modifyitems,
# which would otherwise run before this one (it is registered later) and see none.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    import json

    from tests.tiers import derive_marks, starts_something

    recorded = json.loads((REPO / "tests" / "durations.json").read_text())
    for item in items:
        derive_marks(item)
        item.add_marker(pytest.mark.xdist_group(group_of(item.nodeid)))
    slow_units = {group_of(item.nodeid) for item in items if starts_something(item)} if _rank_free_first() else set()
    # Python's sort is stable: within a unit, the tests keep the order they were written in.
    items.sort(key=lambda item: (group_of(item.nodeid) in slow_units,
                                 -recorded.get(group_of(item.nodeid), UNRECORDED_S)))


# The tiers' hooks (marks `slow`/`terminal`, the rank counter and its guard): tests/tiers.py.
from tests.tiers import (  # noqa: E402,F401
    _current_test,
    pytest_configure,
    pytest_runtest_makereport,
    pytest_terminal_summary,
)
