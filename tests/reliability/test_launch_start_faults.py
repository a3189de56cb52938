"""Issue 27 item 12 and issue 23 item 11's message: Ctrl-C while tuner is still starting,
`tuner launch`'s exit status for a script's own non-zero code, a missing ``-m`` module found
before any rank starts, and a taken rendezvous port named before any rank starts.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tuner.compiler.diagnostics import EXIT_INTERRUPTED, EXIT_RANK_FAILED, EXIT_USAGE

from tests import harness
from tests.launch.launch_helpers import compile_build, env

REPO = Path(__file__).resolve().parents[2]

#: Runs `python -m tuner ARGV` and sends itself SIGINT at the K-th module import counted from
#: `tuner.commands.cli`'s: a Ctrl-C that lands while tuner is still importing (the first tenth of a
#: second), at a chosen place instead of a timing that a busy machine shifts.
CHILD = textwrap.dedent("""\
    import os, runpy, signal, sys
    K = int(sys.argv[1]); count = 0; armed = False
    def hook(event, args):
        global count, armed
        if event != "import":
            return
        armed = armed or args[0] == "tuner.commands.cli"
        if armed:
            count += 1
            if count == K:
                os.kill(os.getpid(), signal.SIGINT)
    sys.addaudithook(hook)
    sys.argv = ["tuner", *sys.argv[2:]]
    runpy.run_module("tuner", run_name="__main__", alter_sys=True)
""")


def test_ctrl_c_while_tuner_starts_prints_no_traceback(tmp_path):
    """`tuner compile` imports about 260 modules before it writes; a SIGINT at any of a spread
    of them ends with exit 130 and one line, never a KeyboardInterrupt traceback."""
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    settings = REPO / "examples" / "fsdp2.toml"
    for k in (1, 2, 4, 10, 30, 80, 150, 230):
        p = subprocess.run([sys.executable, str(child), str(k), "compile", str(settings), "--out",
                            str(tmp_path / "b")], capture_output=True, text=True, timeout=120, env=env())
        assert "Traceback" not in p.stderr, (k, p.stderr[-2000:])
        assert p.returncode in (EXIT_INTERRUPTED, 0), (k, p.returncode, p.stderr[-2000:])
        if p.returncode == EXIT_INTERRUPTED:
            assert p.stderr.strip().endswith("interrupted"), (k, p.stderr)


@pytest.fixture(scope="module")
def one_rank_build(tmp_path_factory) -> Path:
    return compile_build(tmp_path_factory.mktemp("launch1"), {"hardware": {"platform": "cpu", "num_processes": 1}})


@pytest.mark.slow  # starts a rank process (tests/tiers.py)
def test_script_exit_code_is_reported_and_mapped_to_1(one_rank_build, tmp_path):
    """docs/launch.md: exit 1 when a rank fails; the script's own code (200, which would read as
    a signal) is named in the message, not passed on."""
    script = tmp_path / "fails.py"
    script.write_text("import sys\nsys.exit(200)\n")
    p = harness.tuner('launch', str(one_rank_build), str(script), cwd=tmp_path, timeout=300)
    assert p.returncode == EXIT_RANK_FAILED, p.stderr[-3000:]
    assert "exit code 200" in p.stderr


def test_missing_module_fails_before_any_rank_starts(one_rank_build, tmp_path):
    p = harness.tuner('launch', str(one_rank_build), '-m', 'no_such_module', cwd=tmp_path, timeout=120)
    assert p.returncode == EXIT_USAGE, p.stderr[-3000:]
    assert "no module named 'no_such_module'" in p.stderr
    assert "Traceback" not in p.stderr and "rank" not in p.stderr  # no rank was started


def test_taken_rendezvous_port_is_named_before_ranks_start(tmp_path):
    """Machine 0 of a two-machine build whose port another program listens on."""
    build = compile_build(tmp_path / "p", {"hardware": {"platform": "cpu", "num_processes": 2, "num_machines": 2,
                                                        "main_process_ip": "127.0.0.1"}})
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('ran')\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        p = harness.tuner('launch', '--machine-rank', '0', '--main-port', str(port), str(build), str(script), cwd=tmp_path, timeout=120)
    assert p.returncode == EXIT_RANK_FAILED, p.stderr[-3000:]
    assert f"rendezvous port {port} on this machine (machine 0) is taken" in p.stderr
    assert "ran" not in p.stderr and "Traceback" not in p.stderr
