"""The CPU layer's guards: an untested accelerate is refused, and a correction that did not
take effect is reported (naming both distributed types and accelerate's version) instead of
training with another strategy than the compiled one.

In-process, on a real one-rank gloo process group and a real `Accelerator` (accelerate's
own shared state); nothing of accelerate is mocked.
"""

from __future__ import annotations

import pytest
from tuner.runtime import cpu_shim
from tuner.runtime.artefacts import RunError

from tests.one_rank_group import one_rank_group


@pytest.mark.parametrize("version", ["1.15.0", "1.15.3"])
def test_a_tested_accelerate_passes(version):
    assert cpu_shim.check_accelerate_version(version, allow_untested=False) is True


@pytest.mark.parametrize("version", ["1.14.2", "1.16.0", "2.0.0", "1.15.0.dev0", "not-a-version"])
def test_an_untested_accelerate_is_refused_with_the_fix(version, monkeypatch):
    monkeypatch.delenv("TUNER_ALLOW_UNTESTED", raising=False)
    with pytest.raises(RunError) as exc:
        cpu_shim.check_accelerate_version(version)
    msg = exc.value.message
    assert f"tested with accelerate {cpu_shim.TESTED_ACCELERATE}; you have {version}" in msg, msg
    assert "TUNER_ALLOW_UNTESTED=1" in msg and "pip install 'accelerate>=" in msg, msg
    assert exc.value.exit_code == 2


def test_tuner_allow_untested_lets_it_through(monkeypatch):
    monkeypatch.setenv("TUNER_ALLOW_UNTESTED", "1")
    assert cpu_shim.check_accelerate_version("1.16.0") is False  # allowed, and known to be untested
    monkeypatch.setenv("TUNER_ALLOW_UNTESTED", "0")
    with pytest.raises(RunError):
        cpu_shim.check_accelerate_version("1.16.0")


def test_the_tested_range_is_pyprojects_and_admits_the_installed_accelerate():
    import tomllib

    from tests.conftest import REPO

    runtime = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["runtime"]
    assert f"accelerate{cpu_shim.TESTED_ACCELERATE}" in runtime
    cpu_shim.check_accelerate_version(cpu_shim.accelerate_version(), allow_untested=False)


@pytest.fixture
def cpu_accelerator(tmp_path, monkeypatch):
    """A real `Accelerator` on CPU in a one-rank gloo process group (as on a rank, smaller)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    for var in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    AcceleratorState._reset_state(reset_partial_state=True)
    with one_rank_group(tmp_path):
        try:
            yield Accelerator(cpu=True)
        finally:
            AcceleratorState._reset_state(reset_partial_state=True)


def test_the_correction_takes_effect_and_is_verified(cpu_accelerator):
    from accelerate.state import AcceleratorState, PartialState

    assert cpu_accelerator.distributed_type.name != "FSDP"  # accelerate alone, on CPU
    changes = cpu_shim.correct_state(cpu_accelerator, "fsdp2", plan_type="FSDP")
    assert any(c.startswith("distributed_type:") for c in changes), changes
    assert cpu_accelerator.distributed_type.name == "FSDP"
    assert AcceleratorState().distributed_type.name == PartialState().distributed_type.name == "FSDP"


def test_a_correction_that_did_not_take_effect_fails_naming_both_types(cpu_accelerator, monkeypatch):
    """As if accelerate kept its state somewhere the layer does not write: the layer's writes
    are skipped, and the check reads accelerate's real state back."""
    before = cpu_accelerator.distributed_type.name
    monkeypatch.setattr(cpu_shim, "_apply", lambda strategy, given: [])
    with pytest.raises(RunError) as exc:
        cpu_shim.correct_state(cpu_accelerator, "fsdp2", plan_type="FSDP")
    msg = exc.value.message
    assert "did not take effect" in msg and "distributed type is FSDP" in msg, msg
    assert f"AcceleratorState {before}" in msg and f"PartialState {before}" in msg, msg
    assert f"accelerate {cpu_shim.accelerate_version()}" in msg and cpu_shim.TESTED_ACCELERATE in msg, msg


def test_a_gpu_builds_data_parallel_is_multi_cpu_on_cpu():
    assert cpu_shim.cpu_type("MULTI_GPU") == "MULTI_CPU"
    assert [cpu_shim.cpu_type(t) for t in ("FSDP", "DEEPSPEED", "NO")] == ["FSDP", "DEEPSPEED", "NO"]


def test_a_one_process_plan_accepts_the_one_rank_group_accelerate_sees(tmp_path, monkeypatch):
    """tuner starts even one process as a rank of torch's elastic launcher; accelerate reads
    that rank's environment as MULTI_CPU, which is the one-process plan (NO) on CPU."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    for var, value in {"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(var, value)
    for var in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"):
        monkeypatch.delenv(var, raising=False)
    AcceleratorState._reset_state(reset_partial_state=True)
    with one_rank_group(tmp_path):
        try:
            acc = Accelerator(cpu=True)
            assert acc.distributed_type.name == "MULTI_CPU"  # what a one-rank tuner run sees
            cpu_shim.correct_state(acc, "single", plan_type="NO")  # accepted: no RunError
            with pytest.raises(RunError, match="distributed type is FSDP"):
                cpu_shim.verify(acc, "FSDP")
        finally:
            AcceleratorState._reset_state(reset_partial_state=True)
