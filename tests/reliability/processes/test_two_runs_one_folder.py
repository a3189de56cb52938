"""Issue 40 item 1: two `tuner run` started from one folder at the same moment never cross.

Both compile into the same ``build/``; each must train (or refuse) with the settings it was
started with, into its own output folder, and never exit 0 for a run that trained something
else. Most repetitions race two runs that are refused after their compile and their output
lock but before any rank starts (their output folder already holds a run): each refusal must
name the run's own output folder. Those runs are `tuner run`'s own code in two processes forked
at the same moment from one interpreter that has imported tuner (`RACER`: one interpreter start
for the eight pairs instead of sixteen; the same compile, the same lock, across real processes).
Two repetitions launch real ranks.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.reliability.conftest import run_env
from tests.reliability.processes.processes import leftovers
from tests.reliability.rel_helpers import rank_lines

pytestmark = pytest.mark.slow  # starts tuner processes (and ranks)

SETTINGS = """\
[model]
family = "causal_lm"
path = "builtin:micro-llama"
[hardware]
platform = "cpu"
num_processes = 1
[data]
seq_len = 16
[training]
micro_batch_size = 1
max_steps = {steps}
[checkpoint]
every_steps = 0
[output]
dir = "{out}"
{extra}"""
FSDP2 = "[fsdp]\nenabled = true\nversion = 2\n"


def _project(d: Path, a: tuple[str, int, str], b: tuple[str, int, str]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, (out, steps, extra) in (("a", a), ("b", b)):
        (d / f"{name}.toml").write_text(SETTINGS.format(out=out, steps=steps, extra=extra), encoding="utf-8")


def _race(d: Path, *extra_args: str, timeout: int = 300) -> dict[str, subprocess.CompletedProcess]:
    """Start `tuner run a.toml` and `tuner run b.toml` in `d` at the same moment."""
    procs = {n: subprocess.Popen([sys.executable, "-m", "tuner", "run", f"{n}.toml", *extra_args], cwd=d,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env())
             for n in ("a", "b")}
    done = {}
    for n, p in procs.items():
        out, err = p.communicate(timeout=timeout)
        done[n] = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    return done


def _earlier_run(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n', encoding="utf-8")


CHEAP = [  # (a: output, strategy extra), (b: ...): same and different strategies, same and different folders
    ("out-a", "", "out-b", ""), ("out-a", "", "out-b", FSDP2), ("out-a", FSDP2, "out-b", ""),
    ("out-a", FSDP2, "out-b", FSDP2), ("out", "", "out", FSDP2), ("out", "", "out", ""),
    ("out-a", "", "out-b", FSDP2), ("out", FSDP2, "out", ""),
]
#: `tuner run a.toml` and `tuner run b.toml` in each folder of argv[1] (JSON), as two processes forked
#: at once (both wait on one pipe, then run): their exit codes, their output in the folder's a.err/b.err.
#: It warms up first with one refusal in argv[2], so that the forked runs import nothing of their own.
RACER = textwrap.dedent("""\
    import json, os, sys, traceback
    from tuner.commands.cli import main

    def run(name):
        try:
            code = main(["run", f"{name}.toml"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 70
        sys.stdout.flush()
        sys.stderr.flush()
        return code or 0

    os.chdir(sys.argv[2])
    assert run("a") == 2, "the warm-up run was not refused"
    got = []
    for d in json.loads(sys.argv[1]):
        r, w = os.pipe()
        kids = {}
        for name in ("a", "b"):
            pid = os.fork()
            if pid == 0:
                os.close(w)
                os.chdir(d)
                fd = os.open(f"{name}.err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.read(r, 1)  # the start: both at once
                os._exit(run(name))
            kids[name] = pid
        os.close(r)
        os.write(w, b"go")
        os.close(w)
        got.append({n: os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for n, p in kids.items()})
    print(json.dumps(got))
""")


def _forked_races(dirs: list[Path], warm: Path) -> list[dict[str, subprocess.CompletedProcess]]:
    """Each folder's two runs raced by RACER: per folder, name -> (exit code, "", its output)."""
    p = subprocess.run([sys.executable, "-c", RACER, json.dumps([str(d) for d in dirs]), str(warm)],
                       capture_output=True, text=True, env=run_env(), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    codes = json.loads(p.stdout.strip().splitlines()[-1])
    return [{n: subprocess.CompletedProcess(["tuner", "run", f"{n}.toml"], code[n], "",
                                            (d / f"{n}.err").read_text(errors="replace")) for n in ("a", "b")}
            for d, code in zip(dirs, codes, strict=True)]


def test_racing_runs_are_refused_with_their_own_folder(tmp_path):
    """8 racing pairs refused before any rank starts (their folders hold an earlier run): each
    names its own output folder (or the other run's lock on a shared one), never the other's."""
    dirs = []
    for i, (out_a, extra_a, out_b, extra_b) in enumerate(CHEAP):
        d = tmp_path / f"p{i}"
        _project(d, (out_a, 2, extra_a), (out_b, 3, extra_b))
        for out in {out_a, out_b}:
            _earlier_run(d / out)
        dirs.append(d)
    warm = tmp_path / "warm"
    _project(warm, ("out", 2, ""), ("out", 2, ""))
    _earlier_run(warm / "out")
    before = rank_lines()
    races = _forked_races(dirs, warm)
    assert rank_lines() == before, "a refused run started ranks"
    for i, ((out_a, _, out_b, _), d, got) in enumerate(zip(CHEAP, dirs, races, strict=True)):
        for name, out, other in (("a", out_a, out_b), ("b", out_b, out_a)):
            p = got[name]
            assert p.returncode == 2, (i, name, p.returncode, p.stderr[-2000:])
            assert "Traceback" not in p.stderr, (i, name, p.stderr[-2000:])
            mine = f"{d / out} already holds a run" in p.stderr
            locked = out == other and f"another tuner run is using {d / out}" in p.stderr
            assert mine or locked, (i, name, p.stderr[-2000:])
            if out != other:
                assert str(d / other) not in p.stderr, (i, name, p.stderr[-2000:])
        for out in {out_a, out_b}:  # nothing replaced the earlier run's record
            assert (d / out / "metrics.jsonl").read_text() == '{"step": 1, "loss": 1.0}\n'
            assert not (d / out / ".tuner-build").exists()


def _steps(out: Path) -> list[int]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["step"] for r in rows if "loss" in r]


@pytest.mark.parametrize("same_folder", [False, True], ids=["two-folders", "one-folder"])
def test_racing_real_runs_train_their_own_settings(tmp_path, same_folder):
    """DDP (2 steps) and FSDP2 (3 steps) started at once with real ranks. Two folders: each
    trains its own steps and strategy into its own folder. One folder: one run trains, the other
    is refused before any rank starts; never both exit 0, never two `step 1` rows."""
    out_a, out_b = ("out", "out") if same_folder else ("out-a", "out-b")
    _project(tmp_path, (out_a, 2, ""), (out_b, 3, FSDP2))
    got = _race(tmp_path)
    for p in got.values():
        assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert not leftovers(str(tmp_path)), leftovers(str(tmp_path))  # neither run left a rank behind
    if not same_folder:
        for name, out, steps, fsdp in (("a", out_a, 2, False), ("b", out_b, 3, True)):
            assert got[name].returncode == 0, (name, got[name].stderr[-3000:])
            assert _steps(tmp_path / out) == list(range(1, steps + 1)), name
            manifest = json.loads((tmp_path / out / ".tuner-build" / "manifest.json").read_text())
            assert manifest["settings"]["output"]["dir"] == out
            assert ("fsdp" in manifest["plan"]["strategy"]) == fsdp, (name, manifest["plan"]["strategy"])
        return
    codes = sorted(p.returncode for p in got.values())
    assert codes == [0, 2], {n: (p.returncode, p.stderr[-1500:]) for n, p in got.items()}
    winner = "a" if got["a"].returncode == 0 else "b"
    loser = got["b" if winner == "a" else "a"]
    assert f"another tuner run is using {tmp_path / 'out'}" in loser.stderr or "already holds a run" in loser.stderr
    assert "rank" not in loser.stderr.replace("tuner run", ""), loser.stderr  # refused before any rank
    assert _steps(tmp_path / "out") == list(range(1, (2 if winner == "a" else 3) + 1))
