"""Loading `--callback MODULE:NAME` specs (every rank does this) and calling callbacks.

The trainer's calls themselves are exercised by every traced run: the runtime tests'
per-rank traces (tests/runtime/trace_callbacks.py) exist only through them."""

from __future__ import annotations

import sys

import pytest
from tuner.runtime import callbacks
from tuner.runtime.artefacts import RunError
from tuner.runtime.callbacks import Callbacks, TrainerCallback


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_cbs.py").write_text(
        "from tuner.runtime.callbacks import TrainerCallback\n"
        "class Count(TrainerCallback):\n"
        "    def __init__(self): self.steps = 0\n"
        "    def on_step_end(self, trainer, metrics): self.steps += 1\n"
        "class Duck:\n"
        "    def on_train_end(self, trainer): pass\n"
        "def two(): return [Count(), Duck()]\n"
        "instance = Count()\n"
        "not_one = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # as a rank has the project directory on its path
    yield "my_cbs"
    sys.modules.pop("my_cbs", None)


def test_a_class_a_function_or_an_instance(user_module):
    (made,) = callbacks.load(f"{user_module}:Count")
    assert type(made).__name__ == "Count" and made.steps == 0
    assert [type(c).__name__ for c in callbacks.load(f"{user_module}:two")] == ["Count", "Duck"]
    (same,) = callbacks.load(f"{user_module}:instance")
    assert same is sys.modules[user_module].instance


@pytest.mark.parametrize("spec, says", [
    ("my_cbs", "write it as MODULE:NAME"),
    ("no_such_module_xyz:thing", "cannot import no_such_module_xyz"),
    ("my_cbs:absent", "has no 'absent'"),
    ("my_cbs:not_one", "int is not a callback"),
])
def test_a_bad_spec_is_one_clear_error(user_module, spec, says):
    with pytest.raises(RunError) as exc:
        callbacks.load(spec)
    assert says in exc.value.message and spec in exc.value.message, exc.value.message


def test_fire_calls_each_callback_that_has_the_event_in_order():
    seen = []

    class A(TrainerCallback):
        def on_save(self, trainer, partial_dir):
            seen.append(("A", trainer, partial_dir))

    class OnlyEnd:
        def on_train_end(self, trainer):
            seen.append(("end", trainer))

    cbs = Callbacks([A(), OnlyEnd(), A()])
    cbs.fire("on_save", "T", "dir")
    cbs.fire("on_train_end", "T")
    assert seen == [("A", "T", "dir"), ("A", "T", "dir"), ("end", "T")]
    with pytest.raises(AssertionError):
        cbs.fire("on_misspelt", "T")
