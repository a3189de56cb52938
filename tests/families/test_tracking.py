"""Trackers through accelerate's tracker API ([logging] log_with) and rank 0's progress:
TensorBoard event files hold the loss of every log step; a terminal gets a bar with loss,
units/s, learning rate and ETA, anything else one plain line per log step; a tracker that
is not installed is refused before any rank starts, naming the key and the install."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys

import pytest
from tuner.compiler.diagnostics import EXIT_USAGE
from tuner.compiler.keys.settings import Settings
from tuner.runtime import tracking
from tuner.runtime.progress import Reporter

from tests.conftest import EXAMPLES, run_tuner

LOSSES = [2.5, 2.25, 2.0, 1.75, 1.5]


@pytest.fixture
def fresh_accelerate_state():
    from accelerate.state import AcceleratorState, GradientState, PartialState

    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    PartialState._reset_state()


def _metrics(i: int) -> dict:
    return {"loss": LOSSES[i], "lr": 1e-4 * (i + 1), "epoch": 0, "throughput": 1000.0 + i, "tokens_seen": 64 * (i + 1)}


def test_tensorboard_events_hold_the_loss_of_every_log_step(tmp_path, fresh_accelerate_state):
    pytest.importorskip("tensorboard")
    from accelerate import Accelerator
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    s = Settings.from_dict({"logging": {"log_with": ["tensorboard"], "project": "proj"}})
    out = tmp_path / "out"
    acc = Accelerator(**tracking.accelerator_kwargs(s, out, tmp_path))
    assert tracking.start(acc, s, out, tmp_path) == ["tensorboard"]
    rep = Reporter(out, len(LOSSES), 0, "tokens", main=True, track=lambda v, step: acc.log(v, step=step),
                   stream=io.StringIO(), tty=False)
    for i in range(len(LOSSES)):
        rep.step(i + 1, _metrics(i))
    rep.close()
    acc.end_training()
    runs = [p.parent for p in (out / "logs" / "proj").rglob("events.out.tfevents.*")]
    scalars = {}
    for run in runs:
        ea = EventAccumulator(str(run))
        ea.Reload()
        if "loss" in ea.Tags()["scalars"]:
            scalars = {e.step: e.value for e in ea.Scalars("loss")}
            lrs = [e.value for e in ea.Scalars("lr")]
    assert scalars == {i + 1: pytest.approx(v) for i, v in enumerate(LOSSES)}
    assert lrs == [pytest.approx(1e-4 * (i + 1)) for i in range(len(LOSSES))]
    assert (out / "metrics.jsonl").read_text().count("\n") == len(LOSSES)  # metrics.jsonl beside them


def test_training_tensorboard_and_all_mean_installed_trackers():
    s = Settings.from_dict({"training": {"tensorboard": True}, "logging": {"log_with": ["tensorboard"]}})
    assert tracking.requested(s) == ["tensorboard"]
    everything = tracking.requested(Settings.from_dict({"logging": {"log_with": ["all"]}}))
    assert everything == [n for n, pkg in tracking.PACKAGES.items() if tracking._installed(pkg)]
    flat = tracking.flat_config(s)
    assert flat["training.tensorboard"] is True and flat["logging.log_with"] == '["tensorboard"]'


def test_plain_lines_off_a_terminal(tmp_path):
    stream = io.StringIO()
    rep = Reporter(tmp_path, 5, 0, "tokens", main=True, stream=stream, tty=False)
    for i in range(5):
        rep.step(i + 1, _metrics(i) if i % 2 == 0 else None)  # log every other step
    rep.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert re.fullmatch(r"step 1/5 loss 2\.5000 lr 1\.00e-04 tokens/s 1000 eta \d+:\d\d:\d\d", lines[0]), lines[0]
    assert lines[2].startswith("step 5/5 loss 1.5000 lr 5.00e-04 tokens/s 1004 eta 0:00:00")


def test_bar_on_a_terminal_shows_loss_rate_lr_and_eta(tmp_path):
    stream = io.StringIO()
    rep = Reporter(tmp_path, 5, 0, "tokens", main=True, stream=stream, tty=True)
    rep.step(1, _metrics(0))
    rep.step(2, _metrics(1))
    rep._bar.refresh()
    text = stream.getvalue().split("\r")[-1]
    rep.close()
    assert "2/5" in text and "loss=2.2500" in text and "lr=2.00e-04" in text and "tokens/s=1001" in text, text
    assert "<" in text  # tqdm's remaining time (ETA)


def test_a_tracker_that_is_not_installed_is_refused_before_any_rank(tmp_path):
    shutil.copy(EXAMPLES / "fsdp2.toml", tmp_path / "settings.toml")
    c = run_tuner("compile", str(tmp_path / "settings.toml"), "--out", str(tmp_path / "build"), "-q",
                  "--set", "report_to=tensorboard,mlflow")  # the HF Trainer's name
    assert c.returncode == 0, c.stderr
    code = ("import sys; sys.modules['tensorboard'] = None; sys.modules['mlflow'] = None\n"
            f"from tuner.commands.cli import main; sys.exit(main(['run', {str(tmp_path / 'build')!r}]))")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == EXIT_USAGE, p.stderr
    assert ('logging.log_with = ["tensorboard"] needs tensorboard, which is not installed: '
            "pip install 'tuner-train[tracking]'") in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "out" / "metrics.jsonl").exists()
