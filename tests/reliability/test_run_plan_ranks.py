"""The ranks read the run plan and decide none of it again (runtime/run_plan.py; the plan's
own decisions and refusals are tested in-process in tests/runtime/test_run_plan.py).

One 1-rank resume of the session's finished run (tests/reliability/conftest.py), with a
callback module that, imported on the rank before the trainer starts, counts every call of the
resume policy the plan applies (a call on the rank is the re-decision this test forbids) and
writes down the plan the trainer holds."""

from __future__ import annotations

import json

import pytest
from tuner.runtime.run_plan import PLAN_FILE, read_rank_plan

from tests.reliability.test_persons_files import copy_run, run

pytestmark = pytest.mark.slow

PROBE = '''
import dataclasses, json
from pathlib import Path

import tuner.runtime.checkpoint as ckpt
import tuner.runtime.resume_rules as rules
import tuner.runtime.run_lock as run_lock
import tuner.runtime.run_plan as run_plan
from tuner.runtime.callbacks import TrainerCallback

CALLED = []


def _counted(module, name):
    real = getattr(module, name)

    def counted(*args, **kwargs):
        CALLED.append(f"{module.__name__}.{name}")
        return real(*args, **kwargs)

    setattr(module, name, counted)


for module, names in ((rules, ("check_compatible", "check_strategy", "check_global_batch", "batches_to_skip")),
                      (ckpt, ("resolve_resume", "latest_intact", "check_step")),
                      (run_plan, ("make_plan", "decide_resume")), (run_lock, ("check_output_dir",))):
    for name in names:
        _counted(module, name)


class Probe(TrainerCallback):
    def on_train_begin(self, trainer):
        Path("probe.json").write_text(json.dumps({"plan": dataclasses.asdict(trainer.plan), "called": CALLED}))
'''


def test_the_ranks_read_the_plan_and_call_no_resume_policy(finished_run, tmp_path):
    d = copy_run(finished_run, tmp_path / "run")
    (d / "plan_probe.py").write_text(PROBE, encoding="utf-8")
    p = run("run", d / "settings.toml", "--resume", "latest", "--max-steps", "6", "--callback", "plan_probe:Probe",
            cwd=d)
    assert p.returncode == 0, p.stderr[-3000:]
    step4 = d / "out" / "checkpoints" / "step-4"
    assert f"resumed from {step4} at step 4" in p.stdout, p.stdout[-2000:]
    written = read_rank_plan(d / "out" / ".tuner-build" / PLAN_FILE)  # beside the run's own copy of its build
    assert written.resume.chosen == written.resume.checkpoint == str(step4) and written.resume.step_checked
    assert written.max_steps == 6 and written.callbacks == ("plan_probe:Probe",)
    probe = json.loads((d / "probe.json").read_text())
    held = probe["plan"]
    assert held == json.loads(written.to_json()), held  # what the rank read is the file
    assert probe["called"] == [], f"the rank decided the resume again: {probe['called']}"
