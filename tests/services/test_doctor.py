"""Hardware doctor: real facts from this machine, and injected fake GPU machines."""

from __future__ import annotations

import json
import socket

import pytest
from tuner.compiler.compile import compile_text
from tuner.compiler.read import hardware
from tuner.compiler.read.hardware import GIB, GpuInfo, HardwareFacts

from tests.conftest import run_tuner

DS = '[model]\npath = "builtin:tiny-llama"\n[hardware]\nnum_processes = 2\n[deepspeed]\nenabled = true\nzero_stage = 2\n'


def test_doctor_on_this_machine_for_real(tmp_path):
    """`tuner doctor --json` asks torch and DeepSpeed here, and saves the facts for the compiler."""
    settings = tmp_path / "settings.toml"
    settings.write_text('[model]\npath = "builtin:tiny-llama"\n[output]\ndir = "runs/a"\n'
                        '[deepspeed]\nenabled = true\nzero_stage = 3\noffload_param = "nvme"\nnvme_path = "swap"\n')
    (tmp_path / "swap").mkdir()
    out = run_tuner("doctor", "--json", str(settings), timeout=180)
    assert out.returncode == 0, out.stderr
    facts = HardwareFacts.from_json(out.stdout)
    assert facts.platform in ("cpu", "cuda", "rocm", "mps")
    if facts.platform == "cpu":
        assert facts.gpus == [] and not facts.cuda_version
    assert facts.cpu_cores >= 1 and facts.host_memory_bytes > 2**28
    assert 0 < facts.host_available_bytes <= facts.host_memory_bytes
    assert facts.versions["torch"] and facts.versions["transformers"] and "diffusers" in facts.versions
    assert {o.name for o in facts.ops} == {"cpu_adam", "async_io"}
    disks = {d.label: d for d in facts.disks}
    assert set(disks) == {"output.dir", "deepspeed.nvme_path"}
    assert disks["output.dir"].checked_path == str(tmp_path)  # runs/a does not exist yet
    assert disks["deepspeed.nvme_path"].free_bytes > 0
    assert facts.hostname == socket.gethostname()
    # Saved for the compiler, which uses them on this host without importing torch.
    saved = hardware.saved_facts()
    assert saved is not None and saved.platform == facts.platform
    text = run_tuner("doctor")
    assert text.returncode == 0 and "platform:" in text.stdout and "DeepSpeed op cpu_adam" in text.stdout


def _fake(tmp_path, monkeypatch, **kw) -> HardwareFacts:
    facts = HardwareFacts(**kw)
    path = tmp_path / "facts.json"
    path.write_text(facts.to_json())
    monkeypatch.setenv(hardware.FACTS_ENV, str(path))
    return facts


def eight_a100(**extra) -> dict:
    gpus = [GpuInfo(i, "NVIDIA A100-SXM4-80GB", 80 * GIB, "8.0", True) for i in range(8)]
    p2p = [[True] * 8 for _ in range(8)]
    p2p[0][7] = False
    return dict(platform="cuda", gpus=gpus, cuda_version="12.4", nccl_version="2.21.5", p2p=p2p,
                host_memory_bytes=1024 * GIB, cpu_cores=96, **extra)


def test_injected_gpu_facts_round_trip_and_report(tmp_path, monkeypatch):
    _fake(tmp_path, monkeypatch, **eight_a100())
    facts = hardware.local_facts()
    assert facts.source == "injected" and facts.gpu_count == 8 and facts.gpu_memory_bytes == 80 * GIB
    assert facts.bf16 and facts.gpus[3].compute_capability == "8.0"
    assert HardwareFacts.from_json(facts.to_json()) == facts
    report = facts.report()
    assert "GPUs: 8" in report and "compute capability 8.0, bf16 yes" in report
    assert "NCCL 2.21.5" in report and "peer-to-peer: missing 0->7" in report


def test_bf16_follows_the_compute_capability():
    v100 = HardwareFacts(platform="cuda", gpus=[GpuInfo(0, "Tesla V100", 32 * GIB, "7.0", False)])
    assert not v100.bf16
    assert HardwareFacts(platform="cpu").bf16


def test_compiler_takes_the_platform_from_injected_facts(tmp_path, monkeypatch):
    monkeypatch.delenv("TUNER_PLATFORM", raising=False)
    _fake(tmp_path, monkeypatch, **eight_a100())
    r = compile_text(DS)
    assert r.ok and r.plan.platform == "cuda"
    _fake(tmp_path, monkeypatch, platform="rocm", gpus=[GpuInfo(0, "AMD Instinct MI250X", 64 * GIB, "gfx90a", True)])
    r = compile_text(DS)
    assert "DeepSpeed is not available on ROCm hosts." in [d.message for d in r.diagnostics.errors]
    # A stated target wins (compiling in CI for another machine).
    r = compile_text(DS.replace("[hardware]\n", '[hardware]\nplatform = "cuda"\n'))
    assert r.ok and r.plan.platform == "cuda"


def test_estimate_uses_injected_gpu_memory(tmp_path, monkeypatch):
    _fake(tmp_path, monkeypatch, **eight_a100())
    settings = tmp_path / "settings.toml"
    settings.write_text(DS.replace("[hardware]\n", '[hardware]\nplatform = "cuda"\n'))
    out = run_tuner("estimate", str(settings), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["gpu_capacity"] == 80 * GIB and data["capacity_source"] == "hardware facts (injected)"
    assert data["fits"] is True


def test_unreadable_injected_facts_are_ignored_by_the_compiler(tmp_path, monkeypatch):
    bad = tmp_path / "facts.json"
    bad.write_text("[1, 2")
    monkeypatch.setenv(hardware.FACTS_ENV, str(bad))
    with pytest.warns(hardware.FactsWarning, match="invalid JSON"):  # warned once, then ignored
        assert hardware.injected_facts() is None
    assert compile_text(DS.replace("[hardware]\n", '[hardware]\nplatform = "cuda"\n')).ok
