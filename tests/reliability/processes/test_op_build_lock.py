"""Issue 40 item 2: DeepSpeed's op builds say what they build, and a stale build lock (a killed
build's torch FileBaton) is named with its fix instead of waited on forever.

Every test uses a PRIVATE ``TORCH_EXTENSIONS_DIR`` (never the team's shared one).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.reliability.conftest import run_env
from tests.reliability.processes.processes import leftovers

pytestmark = pytest.mark.slow  # starts tuner processes (and ranks)

ZERO2 = """\
[model]
family = "causal_lm"
path = "builtin:micro-llama"
[hardware]
platform = "cpu"
num_processes = 2
[deepspeed]
enabled = true
zero_stage = 2
[data]
seq_len = 16
[training]
micro_batch_size = 1
max_steps = 1
[output]
dir = "out"
"""


def _killed_build_lock(ext: Path, op: str = "cpu_adam") -> Path:
    """What a killed build leaves: torch's FileBaton lock, created O_EXCL by a process that
    then died (SIGKILL) holding it."""
    (ext / op).mkdir(parents=True)
    lock = ext / op / "lock"
    code = f"import os, signal; os.open({str(lock)!r}, os.O_CREAT | os.O_EXCL); os.kill(os.getpid(), signal.SIGKILL)"
    p = subprocess.run([sys.executable, "-c", code], timeout=30)
    assert p.returncode == -signal.SIGKILL and lock.exists()
    return lock


def test_a_stale_build_lock_is_named_within_10_s(tmp_path):
    """`tuner run` of a ZeRO-2 build names the stale lock and its fix before any rank starts
    (instead of every rank waiting forever), `tuner doctor` shows it, and `tuner check` starts
    no rehearsal on it."""
    ext = tmp_path / "ext"
    lock = _killed_build_lock(ext)
    (tmp_path / "settings.toml").write_text(ZERO2, encoding="utf-8")
    env = {**run_env(), "TORCH_EXTENSIONS_DIR": str(ext)}
    # 10 s on a machine with a core to spare; on an oversubscribed one (the shared development
    # machine ran at a load of 17 on 2 cores) the same 2-3 CPU seconds take proportionally longer.
    bound = 10 * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "tuner", "run", "settings.toml"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    took = time.monotonic() - start
    assert p.returncode == 2, p.stderr[-3000:]
    assert f"DeepSpeed's build lock {lock} is held by no process" in p.stderr and f"rm {lock}" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "rank" not in p.stderr.replace("tuner run", ""), p.stderr
    assert took < bound, f"named after {took:.1f} s (bound {bound:.0f} s)"
    assert lock.exists()  # named, never removed by tuner
    doc = subprocess.run([sys.executable, "-m", "tuner", "doctor"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert f"DeepSpeed op cache {ext}: built: nothing yet" in doc.stdout, doc.stdout[-2000:]
    assert f"STALE: cpu_adam: stale lock {lock} (rm it)" in doc.stdout, doc.stdout[-2000:]
    chk = subprocess.run([sys.executable, "-m", "tuner", "check", "build"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert chk.returncode != 0 and f"rm {lock}" in chk.stdout + chk.stderr, (chk.stdout + chk.stderr)[-3000:]
    assert "Traceback" not in chk.stdout + chk.stderr
    assert not leftovers(str(tmp_path)), leftovers(str(tmp_path))  # no rank or rehearsal left waiting on the lock


def test_a_live_build_is_not_stale(tmp_path):
    """A lock its builder holds open is a build in progress (named with its process), never stale;
    the same file once its holder died is."""
    from tuner.runtime import op_cache

    (tmp_path / "cpu_adam").mkdir()
    (tmp_path / "deepspeed_shm_comm").mkdir()
    (tmp_path / "deepspeed_shm_comm" / "deepspeed_shm_comm.so").write_bytes(b"")
    lock = tmp_path / "cpu_adam" / "lock"
    holder = subprocess.Popen([sys.executable, "-c", f"import os, time; os.open({str(lock)!r}, os.O_CREAT | os.O_EXCL); "
                               "print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        state = {s.name: s for s in op_cache.cache_state(tmp_path)}
        assert state["cpu_adam"].holders == [holder.pid] and not state["cpu_adam"].stale
        assert state["deepspeed_shm_comm"].built and state["deepspeed_shm_comm"].lock is None
        line = op_cache.summary(tmp_path)
        assert "built: deepspeed_shm_comm" in line and f"building now: cpu_adam (process {holder.pid}" in line, line
        op_cache.refuse_stale(tmp_path)  # a build in progress is waited for, not refused
    finally:
        holder.kill()
        holder.wait()
    assert op_cache.cache_state(tmp_path)[0].stale
    with pytest.raises(Exception, match="held by no process"):
        op_cache.refuse_stale(tmp_path)


#: A real DeepSpeed OpBuilder (DeepSpeed's jit_load, torch's cpp_extension.load, ninja, the C
#: compiler) for a tiny C module, built with tuner's announcement installed.
BUILD = textwrap.dedent("""\
    import sys
    from deepspeed.ops.op_builder.builder import OpBuilder
    from tuner.runtime.op_cache import announce_builds

    class Tiny(OpBuilder):
        BUILD_VAR = "DS_BUILD_TUNER_TINY"
        NAME = "tuner_tiny"
        def __init__(self):
            super().__init__(name=self.NAME)
        def absolute_name(self):
            return "tuner_tiny"
        def sources(self):
            return [sys.argv[1]]
        def include_paths(self):
            return []
        def cxx_args(self):
            return ["-O0"]

    announce_builds()
    print("loaded", Tiny().jit_load().__name__, flush=True)
""")
SOURCE = """#include <Python.h>
static struct PyModuleDef tiny = {PyModuleDef_HEAD_INIT, "tuner_tiny", 0, -1, 0};
PyMODINIT_FUNC PyInit_tuner_tiny(void) { return PyModule_Create(&tiny); }
"""


def test_a_build_announces_itself(tmp_path):
    """The first load builds and says so, with how long it took; the second loads silently;
    a stale lock on the op is refused on the rank instead of waited on."""
    (tmp_path / "tiny.cpp").write_text(SOURCE)
    (tmp_path / "build.py").write_text(BUILD)
    env = {**run_env(), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "RANK": "0", "LOCAL_RANK": "0"}
    cmd = [sys.executable, str(tmp_path / "build.py"), str(tmp_path / "tiny.cpp")]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"rank 0: builds DeepSpeed's tuner_tiny op in {tmp_path / 'ext' / 'tuner_tiny'}" in first.stderr, first.stderr
    assert "rank 0: DeepSpeed's tuner_tiny op is ready (" in first.stderr and "loaded tuner_tiny" in first.stdout
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "builds DeepSpeed's" not in again.stderr, again.stderr[-3000:]
    lock = tmp_path / "ext" / "tuner_tiny" / "lock"
    os.close(os.open(lock, os.O_CREAT | os.O_EXCL))  # a build killed since: nobody holds it
    stale = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert stale.returncode != 0 and f"rm {lock}" in stale.stderr, stale.stderr[-3000:]
