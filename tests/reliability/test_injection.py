"""Issue 27 item 9: settings never become commands. Every value that reaches launch.sh,
slurm.sbatch or the Kubernetes manifests is validated by what it is (compiler/keys/patterns.py)
and quoted where it is written; diagnostics never echo a value's control characters raw.

The generated scripts are really run with bash: `TUNER_PYTHON` points at a probe that
records its arguments, and stand-ins for `scontrol` / `srun` let slurm.sbatch run without a
cluster. An injected command would create a marker file; none may exist afterwards.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tuner.compiler.diagnostics import EXIT_INVALID, EXIT_OK

from tests.reliability.rel_helpers import assert_honest, tuner

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="bash scripts")

MARK = "PWNED"


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string (escapes included)


def _settings(tmp: Path, cluster: dict[str, str], hardware: dict[str, str] | None = None) -> Path:
    hw = {"platform": '"cpu"', "num_processes": "2", "num_machines": "2", **(hardware or {})}
    text = "[hardware]\n" + "".join(f"{k} = {v}\n" for k, v in hw.items())
    text += "[cluster]\n" + "".join(f"{k} = {v}\n" for k, v in cluster.items())
    p = tmp / "settings.toml"
    p.write_text(text, encoding="utf-8")
    return p


def _compile(settings: Path, out: Path | None = None) -> tuple[int, str, str]:
    argv = ["compile", settings] + (["--out", out] if out else [])
    code, o, e = tuner(*argv)
    assert_honest(code, o, e, argv)
    return code, o, e


@pytest.mark.parametrize(("section", "key", "value"), [
    ("hardware", "main_process_ip", f"10.0.0.1\ntouch {MARK}\n#"),
    ("hardware", "main_process_ip", f"$(touch {MARK})"),
    ("hardware", "main_process_ip", "10.0.0.1\n"),
    ("cluster", "partition", f"gpu\ntouch {MARK}"),
    ("cluster", "partition", "gpu'; touch x; '"),
    ("cluster", "account", f"acct\n#SBATCH --wrap=touch {MARK}"),
    ("cluster", "time", "\n"),
    ("cluster", "time", "01:00:00\n"),
    ("cluster", "namespace", "$(id)"),
    ("cluster", "namespace", "team a"),
    ("cluster", "namespace", "команда"),
    ("cluster", "namespace", "a\x00b"),
    ("cluster", "namespace", "a\x1b[31mb"),
    ("cluster", "image", "img:1\nrm -rf /"),
    ("cluster", "job_name", "job\n"),
])
def test_hostile_value_refused_naming_the_key(tmp_path, section, key, value):
    cluster = {"type": '"kubernetes"' if key in ("namespace", "image") else '"slurm"'}
    hardware = {}
    (hardware if section == "hardware" else cluster)[key] = _toml(value)
    code, out, err = _compile(_settings(tmp_path, cluster, hardware))
    assert code == EXIT_INVALID, out + err
    assert f"[{section}.{key}]" in out + err
    assert "\x1b" not in out + err and "\x00" not in out + err  # escaped, never raw
    assert not (tmp_path / "build").exists()
    assert not (tmp_path / MARK).exists()


def test_control_characters_in_an_unknown_key_are_escaped(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('"a\\u001b]0;title\\u0007b\\nc" = 1\n[hardware]\nplatform = "cpu"\n', encoding="utf-8")
    code, out, err = _compile(p)
    assert code == EXIT_INVALID
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "\\x1b]0;title\\x07" in out + err


@pytest.mark.parametrize("value", ["10.0.0.1", "node-1.cluster.local", "fe80::1", "::1"])
def test_good_addresses_compile(tmp_path, value):
    code, out, err = _compile(_settings(tmp_path, {"type": '"none"'}, {"main_process_ip": _toml(value)}))
    assert code == EXIT_OK, out + err
    assert (tmp_path / "build" / "launch.sh").is_file()


def _probe(tmp: Path) -> Path:
    """A stand-in Python: records its argv (one JSON list per call) and exits 0."""
    probe = tmp / "probe"
    probe.write_text("#!/usr/bin/env python3\nimport json, os, sys\n"
                     "open(os.environ['PROBE_LOG'], 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n",
                     encoding="utf-8")
    probe.chmod(probe.stat().st_mode | stat.S_IXUSR)
    return probe


def _fake_slurm(tmp: Path) -> Path:
    """scontrol (prints one host) and srun (runs its command once) for bash slurm.sbatch."""
    bin_dir = tmp / "fakebin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho node1\n", encoding="utf-8")
    (bin_dir / "srun").write_text('#!/bin/bash\nwhile [ "${1#--}" != "$1" ]; do shift; done\nexec "$@"\n',
                                  encoding="utf-8")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


HOSTILE_WORDS = [f"$(touch {MARK})", f"`touch {MARK}`", f"a; touch {MARK}", f"a\ntouch {MARK}\nb",
                 f"'; touch {MARK}; '", f'"; touch {MARK}; "', f"${{IFS}}touch${{IFS}}{MARK}", "\\", "a\x1bb"]


def test_generated_scripts_run_no_injected_text(tmp_path):
    """Values that compile (a script's arguments, the build directory's own name) reach the
    scripts quoted: bash runs them as data, the probe sees them byte for byte."""
    project = tmp_path / f"proj $(touch {MARK}) `touch {MARK}` '\"x"
    project.mkdir()
    script = ["train.py", *HOSTILE_WORDS]
    settings = _settings(project, {"type": '"slurm"', "script": json.dumps(script), "partition": '"gpu,cpu"',
                                   "time": '"1-00:00:00"', "account": '"my_acct.1"'},
                         {"main_process_ip": '"10.0.0.1"'})
    code, out, err = _compile(settings)
    assert code == EXIT_OK, out + err
    build = project / "build"
    probe, log, fakebin = _probe(tmp_path), tmp_path / "probe.log", _fake_slurm(tmp_path)
    env = {"PATH": f"{fakebin}:{os.environ['PATH']}", "TUNER_PYTHON": str(probe), "PROBE_LOG": str(log),
           "SLURM_JOB_NODELIST": "node1", "HOME": str(tmp_path)}
    for name in ("launch.sh", "slurm.sbatch"):
        assert subprocess.run(["bash", "-n", str(build / name)], capture_output=True).returncode == 0
        argv = ["bash", str(build / name)] + (["0"] if name == "launch.sh" else [])
        p = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, name + p.stdout + p.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 2
    for call in calls:
        assert call[-len(script):] == script  # every word arrived as written
        assert str(build.resolve()) in call or str(build) in call
    assert not list(tmp_path.rglob(MARK)), "an injected command ran"
    # The manifests hold the same words as YAML strings, never as shell.
    settings.write_text(settings.read_text().replace('type = "slurm"', 'type = "kubernetes"'), encoding="utf-8")
    code, out, err = _compile(settings)
    assert code == EXIT_OK, out + err
    job = yaml.safe_load((build / "trainjob.yaml").read_text())
    assert job["spec"]["trainer"]["args"][-len(script):] == script
