"""The one way the tests run tuner in a subprocess, as a person would: one environment, one
timeout policy. The area helpers (`run_tuner`, `tuner_run`, `run_example`, tests/launch's and
tests/check's `tuner`/`check`/`start`, the reliability runs) are thin names over `tuner` and
`start` here.

* `env()`: the environment of every tuner process a test starts: offline Hugging Face, one
  OpenMP thread per rank, and one process-group timeout (PG_TIMEOUT_S) so that a rank that
  loses its peer fails within it instead of after torch's 30 minutes; the repository root on
  PYTHONPATH (ranks import the tests' callbacks by module name).
* `tuner()`: runs `python -m tuner ARGS` in its own process group to the end; past `timeout`
  the whole group (launcher and ranks) is killed and the test fails naming the command, so
  no rank outlives its test.
* Before a command that may start DeepSpeed ranks, `tuner()` waits for scripts/test.sh's
  background build of DeepSpeed's ops when one is running, saying so (tests/ops_wait.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The process-group timeout of every rank the tests start (torch.distributed's, via tuner).
PG_TIMEOUT_S = 120
#: How long one tuner command may take unless a test says otherwise.
TIMEOUT_S = 600.0
#: The subcommands that may start ranks (and so may need DeepSpeed's ops).
RANK_COMMANDS = {"run", "launch", "check"}


def env(extra: dict | None = None) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    out = {**os.environ, "TUNER_PG_TIMEOUT": str(PG_TIMEOUT_S), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": path}
    out.update({k: str(v) for k, v in (extra or {}).items()})
    return out


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tuner", *map(str, args)]


def _before(args: tuple, cwd: Path | None) -> None:
    if args and str(args[0]) in RANK_COMMANDS and _may_start_deepspeed(args[1:], Path(cwd or ".")):
        from tests.ops_wait import wait_for_ops

        wait_for_ops(nvme=any(_offloads_to_nvme(Path(cwd or ".") / str(a)) for a in args[1:]))


def _may_start_deepspeed(rest: tuple, cwd: Path) -> bool:
    """Whether `tuner run/launch/check REST` may start DeepSpeed ranks (and so need its ops).
    No when it starts no rank (`check --launch-only`) or every build or settings file it names
    is one without DeepSpeed; yes when it names one with DeepSpeed, or none that can be read
    (the command then finds its build itself)."""
    if "--launch-only" in map(str, rest):
        return False
    named = []
    for a in map(str, rest):
        path = cwd / a
        try:
            if (path / "manifest.json").is_file():
                named.append((path / "deepspeed.json").is_file())
            elif path.suffix == ".toml" and path.is_file():
                named.append("deepspeed" in path.read_text(errors="replace"))
        except OSError:
            return True
    return not named or any(named)


def _offloads_to_nvme(path: Path) -> bool:
    """Whether a settings file or build names NVMe (its runs need DeepSpeed's async I/O op)."""
    try:
        if path.is_dir():
            path = path / "deepspeed.json"
        return path.suffix in (".toml", ".json") and path.is_file() and "nvme" in path.read_text(errors="replace")
    except OSError:
        return False


def tuner(*args: str, cwd: Path | None = None, timeout: float = TIMEOUT_S, env: dict | None = None,
          input: str | None = None) -> subprocess.CompletedProcess:
    """`python -m tuner ARGS` to its end: (returncode, stdout, stderr) as text."""
    _before(args, cwd)
    cmd = command(*args)
    proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=globals()["env"](env), start_new_session=True)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        raise AssertionError(f"`tuner {' '.join(map(str, args))}` did not finish in {timeout:.0f} s "
                             f"(its process group was killed):\n{(out + err)[-4000:]}") from None
    finally:
        if proc.poll() is None:  # the test itself was interrupted
            kill_group(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def start(*args: str, cwd: Path | None = None, env: dict | None = None, **popen) -> subprocess.Popen:
    """`python -m tuner ARGS` started (the test signals it, or reads it as it runs); pipes as text."""
    _before(args, cwd)
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(command(*args), cwd=cwd, text=True, env=globals()["env"](env), **popen)


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
