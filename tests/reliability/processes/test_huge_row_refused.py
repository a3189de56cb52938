"""Issue 40 item 4: one huge row never takes the machine.

A JSONL file whose single line is a 100 MB document (made here) drove `tuner data` to 16 GB of
resident memory. `tuner data` and `tuner run` now refuse the row before reading it (and before
any rank starts), naming the file, the row and its size, within 2 GB above the baseline of the
same command on a small file; measured as each process's peak RSS. Every command runs under a
hard 8 GB address-space cap, so that a regression fails here instead of taking the shared machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.conftest import run_env
from tests.reliability.processes.processes import leftovers

pytestmark = pytest.mark.slow  # starts tuner processes (and ranks)

SETTINGS = """\
[model]
family = "causal_lm"
path = "builtin:micro-llama"
[hardware]
platform = "cpu"
num_processes = 2
[data]
path = "{data}"
seq_len = 16
[training]
max_steps = 1
[output]
dir = "out"
"""
MB = 1_000_000
BOUND = 2 << 30
#: Runs `python -m tuner ARGS` under an address-space cap and prints its peak RSS (bytes).
PEAK = ("import resource, subprocess, sys\n"
        "cap = 8 << 30\n"
        "p = subprocess.run([sys.executable, '-m', 'tuner', *sys.argv[1:]], capture_output=True, text=True,\n"
        "                   preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))\n"
        "sys.stderr.write(p.stderr)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
        "sys.exit(p.returncode)\n")


def _peak(d: Path, *args: str) -> tuple[int, int, str]:
    p = subprocess.run([sys.executable, "-c", PEAK, *args], cwd=d, capture_output=True, text=True, timeout=600,
                       env=run_env())
    return p.returncode, int(p.stdout.strip().splitlines()[-1]), p.stderr


def _project(d: Path, name: str) -> Path:
    d.mkdir()
    (d / "settings.toml").write_text(SETTINGS.format(data=name), encoding="utf-8")
    return d


def test_a_100_mb_row_is_refused_within_2_gb(tmp_path):
    small = _project(tmp_path / "small", "rows.jsonl")
    (small / "rows.jsonl").write_text("".join(json.dumps({"text": f"row {i} " * 40}) + "\n" for i in range(200)))
    big = _project(tmp_path / "big", "huge.jsonl")
    with open(big / "huge.jsonl", "w", encoding="utf-8") as fh:  # one 100 MB line, written in pieces
        fh.write(json.dumps({"text": "x"}) + "\n")
        fh.write('{"text": "')
        for _ in range(100):
            fh.write("lorem ipsum " * (MB // 12 + 1))
        fh.write('"}\n')
    size = (big / "huge.jsonl").stat().st_size
    assert size > 100 * MB
    code0, base, err0 = _peak(small, "data", "settings.toml")  # the baseline: the same pipeline on 200 rows
    assert code0 == 0, err0[-2000:]
    figures = {"baseline (tuner data, 200 rows)": base >> 20}
    for cmd in (("data", "settings.toml"), ("run", "settings.toml")):
        code, peak, err = _peak(big, *cmd)
        figures[cmd[0]] = peak >> 20
        assert code == 2, (cmd, code, err[-2000:])
        assert f"{big / 'huge.jsonl'}: line 2" in err and "one row of 100.0 MB" in err, err[-2000:]
        assert "split the document" in err and "Traceback" not in err, err[-2000:]
        assert peak < base + BOUND, (cmd, figures)
        assert not (big / "out").exists() or not any((big / "out").glob("metrics.jsonl"))  # no rank started
        assert not leftovers(str(big)), leftovers(str(big))  # no process of the run left
    print("peak RSS MiB:", figures)
