"""`tuner check`'s lr check computes the settings' schedule without importing transformers in
the launcher (runtime/check/planned.py): the same numbers as transformers' `get_scheduler`
(tuner's trainer's `lr_schedule`), for every schedule it computes itself."""

from __future__ import annotations

import pytest
from tuner.runtime.check.planned import FORMULAS, _lrs_from_transformers, planned_lrs


@pytest.mark.parametrize("kind", FORMULAS)
def test_formulas_are_transformers_schedules(kind):
    for warmup, total in ((0, 6), (2, 6), (3, 10), (5, 4)):
        got = planned_lrs(kind, 3e-4, warmup, total, 12)
        want = _lrs_from_transformers(kind, 3e-4, warmup, total, 12)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-15), (kind, warmup, total)


def test_polynomial_plan_takes_the_settings_power_and_end():
    """A polynomial schedule imported from SimpleTuner (power 0.8, its lr_end) is planned as the
    trainer runs it, not at transformers' defaults (issue 34)."""
    from types import SimpleNamespace

    t = SimpleNamespace(lr_end=4e-7, lr_power=0.8)
    got = planned_lrs("polynomial", 3e-4, 2, 10, 12, t)
    default = planned_lrs("polynomial", 3e-4, 2, 10, 12)
    decay = (3e-4 - 4e-7) * (1 - (5 - 2) / (10 - 2)) ** 0.8 + 4e-7  # step 5, transformers' polynomial formula
    assert got[5] == pytest.approx(decay, rel=1e-9) and got != default
