"""The suite's tiers: `slow` (starts rank processes) and `terminal` (drives a real terminal);
the fast tier is everything else (`scripts/test.sh --fast`, i.e. `-m "not slow and not terminal"`).

Marks are written on a test or its module (`pytestmark = pytest.mark.slow`) or derived here: a
test that uses a fixture that launches ranks (LAUNCHING_FIXTURES) is `slow`; a test in a module
that imports the tmux harness (tests/tui/tmux.py) is `terminal`.

Nothing relies on the marks being right: every rank process the tests start is recorded
(tests/harness_site/sitecustomize.py: its test, rank and world size), so that
* in the fast tier a rank refuses to start, naming the fix: a test that starts ranks cannot
  pass there unmarked (and a tmux server refuses likewise, `require_mark`);
* in any run, a test that started ranks without the `slow` mark is named at the end, and each
  test's rank launches are recorded in its report (`rank_launches`, JUnit XML properties), and
  summed per file at the end of the run: the launch count.
"""

from __future__ import annotations

import inspect
import os
import tempfile
from pathlib import Path

import pytest

SITE = Path(__file__).resolve().parent / "harness_site"
#: session/module fixtures that start ranks (a test using one is `slow`)
LAUNCHING_FIXTURES = {"finished_run", "finished_fsdp_run"}
TMUX_FILE = Path(__file__).resolve().parent / "tui" / "tmux.py"

_current: list = [None]


def starts_something(item) -> bool:
    return item.get_closest_marker("slow") is not None or item.get_closest_marker("terminal") is not None


def derive_marks(item) -> None:
    if LAUNCHING_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("slow"):
        item.add_marker(pytest.mark.slow)
    module = getattr(item, "module", None)
    if module is not None and not item.get_closest_marker("terminal") and _uses_tmux(module):
        item.add_marker(pytest.mark.terminal)


def _uses_tmux(module) -> bool:
    """The module imported something of the tmux harness, tests/tui/tmux.py (by whatever name
    pytest's import gave that file)."""
    import sys

    for value in vars(module).values():
        name = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
        source = getattr(sys.modules.get(name or ""), "__file__", None)
        if source and Path(source).resolve() == TMUX_FILE:
            return True
    return False


def require_mark(name: str, what: str) -> None:
    """Fail the current test unless it carries mark `name` (called by what starts `what`)."""
    item = _current[0]
    if item is not None and item.get_closest_marker(name) is None:
        pytest.fail(f"{item.nodeid} {what} but is not marked `{name}`: add `pytestmark = pytest.mark.{name}` "
                    "(the fast tier, scripts/test.sh --fast, runs only unmarked tests)", pytrace=False)


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "slow: starts rank processes; not in the fast tier")
    config.addinivalue_line("markers", "terminal: drives a real terminal (tmux); not in the fast tier")
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(SITE) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE), *paths) if p)
    if "TUNER_TEST_RANK_DIR" not in os.environ:  # the controller's (xdist's workers inherit it)
        os.environ["TUNER_TEST_RANK_DIR"] = tempfile.mkdtemp(prefix="tuner-test-ranks-")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    os.environ["TUNER_TEST_RANK_LOG"] = str(Path(os.environ["TUNER_TEST_RANK_DIR"]) / f"{worker}.log")
    if os.environ.get("TUNER_TEST_FAST"):
        os.environ["TUNER_TEST_NO_RANKS"] = "1"


@pytest.fixture(autouse=True)
def _current_test(request):
    _current[0] = request.node
    yield
    _current[0] = None


def _ranks_of(nodeid: str) -> tuple[int, int]:
    """(launches, rank processes) the test `nodeid` started, from this process's rank log."""
    try:
        lines = Path(os.environ["TUNER_TEST_RANK_LOG"]).read_text(encoding="utf-8").splitlines()
    except (KeyError, OSError):
        return 0, 0
    nodeid = nodeid.split("@tests/", 1)[0]  # xdist's loadgroup appends "@GROUP"
    mine = [line.split("\t") for line in lines if line.endswith("\t" + nodeid)]
    return sum(1 for f in mine if f[0] == "0"), len(mine)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "teardown":
        return
    launches, processes = _ranks_of(item.nodeid)
    if processes:
        report.user_properties.append(("rank_launches", launches))
        report.user_properties.append(("rank_processes", processes))
        if item.get_closest_marker("slow") is None:
            report.user_properties.append(("ranks_unmarked", 1))


def pytest_terminal_summary(terminalreporter) -> None:
    per_file: dict[str, list[int]] = {}
    unmarked = []
    for reports in terminalreporter.stats.values():
        for r in reports:
            props = dict(getattr(r, "user_properties", ()) or ())
            if getattr(r, "when", "") != "teardown" or "rank_launches" not in props:
                continue
            f = per_file.setdefault(r.nodeid.split("::")[0], [0, 0])
            f[0] += props["rank_launches"]
            f[1] += props["rank_processes"]
            if props.get("ranks_unmarked"):
                unmarked.append(r.nodeid.split("@tests/", 1)[0])
    if not per_file:
        return
    tr = terminalreporter
    tr.write_sep("-", f"rank launches: {sum(v[0] for v in per_file.values())} "
                      f"({sum(v[1] for v in per_file.values())} rank processes) in {len(per_file)} files")
    for name, (launches, processes) in sorted(per_file.items(), key=lambda kv: -kv[1][0]):
        tr.write_line(f"{launches:4d} launches {processes:4d} ranks  {name}")
    if unmarked:
        tr.write_sep("!", f"{len(unmarked)} tests started ranks without the `slow` mark (they would fail in the fast tier)")
        for nodeid in unmarked:
            tr.write_line(nodeid)
