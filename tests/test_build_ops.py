"""scripts/build_ops.py: a warm rerun of the set-up skips the DeepSpeed ops already built,
without importing DeepSpeed or torch; anything changed (versions, Python, libaio, a missing
library) makes it load and check them again."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "build_ops.py"


def _module():
    spec = importlib.util.spec_from_file_location("build_ops", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _built(where: Path, key: dict, libs=("cpu_adam", "deepspeed_shm_comm")) -> None:
    for lib in libs:
        (where / lib).mkdir(parents=True)
        (where / lib / f"{lib}.so").write_bytes(b"")
    (where / ".tuner-ops.json").write_text(json.dumps({"key": key, "built": list(libs),
                                                       "summary": "CPU Adam 90 s; shared-memory collectives 40 s"}))


def test_a_warm_rerun_skips_without_importing_deepspeed_or_torch(tmp_path):
    _built(tmp_path, _module().fingerprint())
    probe = ("import runpy, sys\n"
             "try:\n    runpy.run_path(sys.argv[1], run_name='__main__')\n"
             "except SystemExit as e:\n    assert not e.code, e.code\n"
             "print('imported:', sorted(m for m in ('deepspeed', 'torch') if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", probe, str(SCRIPT)], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "TORCH_EXTENSIONS_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "DeepSpeed ops already built" in r.stdout and "CPU Adam 90 s" in r.stdout, r.stdout
    assert "imported: []" in r.stdout, r.stdout


def test_anything_changed_means_load_and_check_again(tmp_path):
    ops = _module()
    key = ops.fingerprint()
    _built(tmp_path, key)
    assert ops.warm(tmp_path, key) is not None
    for changed in ({"torch": "0.0"}, {"deepspeed": "0.0"}, {"python": "/elsewhere/python"},
                    {"libaio": not key["libaio"]}):
        assert ops.warm(tmp_path, {**key, **changed}) is None, changed
    (tmp_path / "cpu_adam" / "cpu_adam.so").unlink()
    assert ops.warm(tmp_path, key) is None, "a library deleted since"
    (tmp_path / ".tuner-ops.json").write_text("{not json")
    assert ops.warm(tmp_path, key) is None
