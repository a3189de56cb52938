"""Issue 38 item 4 (part): the run's environment knobs are read in one place (runtime/knobs.py)
when used, not at import: a value set after tuner was imported is the one a run gets, and a bad
one is refused naming the variable."""

from __future__ import annotations

import pytest

from tuner.runtime import hang_watch, knobs, launch
from tuner.runtime.artefacts import RunError
from tuner.runtime.launch_env import Topology


def test_a_knob_set_after_import_is_the_one_used(monkeypatch, tmp_path):
    monkeypatch.setenv("TUNER_HANG_S", "7.5")
    monkeypatch.setenv("TUNER_RDZV_TIMEOUT", "41")
    monkeypatch.delenv("TUNER_PG_TIMEOUT", raising=False)
    assert hang_watch.HangWatch(tmp_path).bound == 7.5
    assert knobs.pg_timeout_s() == 300.0
    topo = Topology(num_machines=2, machine_rank=1, main_address="127.0.0.1", main_port=29500, run_id="x")
    assert launch.launch_config(topo, 1, "127.0.0.1:29500", "x").rdzv_configs["timeout"] == 41


@pytest.mark.parametrize("name", sorted(knobs.DEFAULTS))
@pytest.mark.parametrize("raw", ["soon", "0", "-3", "inf", "nan"])
def test_a_bad_knob_is_named(monkeypatch, name, raw):
    monkeypatch.setenv(name, raw)
    with pytest.raises(RunError) as e:
        knobs.check()
    assert f"${name} = {raw!r} is not a positive number of seconds" in e.value.message
