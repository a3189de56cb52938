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
