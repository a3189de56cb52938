"""Issue 37 item 5: an NVMe path compiled off the training machines (a note there) is
verified by `tuner check` on each machine: its preflight facts name it, a missing directory
is a fault with the fix, an existing writable one passes. In-process, no ranks."""

from __future__ import annotations

import shutil

from tuner.compiler.compile import compile_file
from tuner.runtime.check.preflight import local_findings, machine_facts

SETTINGS = """\
[model]
path = "builtin:tiny-llama"
[hardware]
platform = "cpu"
num_processes = 1
[deepspeed]
enabled = true
zero_stage = 3
offload_param = "nvme"
offload_optimizer = "nvme"
nvme_path = "nvme"
"""


def test_tuner_check_verifies_the_nvme_path_on_this_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_PLATFORM", "cpu")
    (tmp_path / "nvme").mkdir()
    (tmp_path / "settings.toml").write_text(SETTINGS)
    result = compile_file(tmp_path / "settings.toml")
    assert result.ok, [d.format() for d in result.diagnostics.items]
    build = result.write()
    from tuner.runtime.artefacts import load

    arts = load(build)
    present = [f for f in local_findings(machine_facts(build, None, 0), arts) if f.check == "nvme-path"]
    assert len(present) == 1 and present[0].status == "ok", present
    shutil.rmtree(tmp_path / "nvme")  # the training machine lacks it
    (missing,) = [f for f in local_findings(machine_facts(build, None, 0), arts) if f.check == "nvme-path"]
    assert missing.status == "fault" and "does not exist" in missing.saw and "mkdir -p" in missing.fix
