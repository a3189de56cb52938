"""Loaded by every Python process the tests start (tests/conftest.py puts this folder on
PYTHONPATH): a process that is a distributed rank (torch's launchers set RANK and LOCAL_RANK)
appends one line to $TUNER_TEST_RANK_LOG: the rank, the world size and the test that started
it ($PYTEST_CURRENT_TEST). tests/conftest.py counts rank launches from these lines and flags a
test that starts ranks without the `slow` mark. In the fast tier ($TUNER_TEST_NO_RANKS) a rank
refuses to start, naming the fix: no test that starts ranks can sit there unmarked.
Nothing happens in a process that is not a rank, or outside the tests."""

import os
import sys

_log = os.environ.get("TUNER_TEST_RANK_LOG")
_argv = getattr(sys, "orig_argv", [])
# Not a rank: a helper a rank (or a script that set RANK in-process) starts, which inherits RANK:
# multiprocessing's spawn (`-c`), a library's own script (py-cpuinfo's, DeepSpeed's CPU probe), any
# process below a rank (TUNER_TEST_IN_RANK, set here for the rank's children).
_helper = ("-c" in _argv or os.environ.get("TUNER_TEST_IN_RANK")
           or any(("site-packages" in a or "dist-packages" in a) and a.endswith(".py") for a in _argv[1:2]))
if _log and "RANK" in os.environ and "LOCAL_RANK" in os.environ and not _helper:
    os.environ["TUNER_TEST_IN_RANK"] = "1"
    _test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0].split("@tests/", 1)[0]  # no xdist group
    try:
        with open(_log, "a", encoding="utf-8") as _fh:
            _fh.write(f"{os.environ['RANK']}\t{os.environ.get('WORLD_SIZE', '?')}\t{os.getppid()}\t{_test}\n")
    except OSError:
        pass
    if os.environ.get("TUNER_TEST_NO_RANKS"):
        sys.stderr.write(f"tests: {_test} starts ranks but runs in the fast tier (scripts/test.sh --fast): "
                         "mark it `slow` (pytestmark = pytest.mark.slow)\n")
        sys.stderr.flush()
        os._exit(97)
