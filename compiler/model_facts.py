"""Checks that need facts about the model or the machine, not just the settings.

The compiler stays torch-free, so these facts come from cached block detection and the
memory estimator (issue: block detection, memory estimation and hardware doctor):

* `check` refuses wrap classes the model does not contain and warns when the chosen
  strategy does not fit the stated or detected memory;
* `nvme_bytes` is the estimator's figure for what NVMe offload must hold, used for the
  free-space check (0 means unknown: the check then only reports the free space).

Until those services exist both know nothing about the model and say nothing.
"""

from __future__ import annotations

from .diagnostics import Diagnostics
from .rules import Plan
from .settings import Settings


def check(s: Settings, plan: Plan, diags: Diagnostics) -> None:
    return None


def nvme_bytes(s: Settings, plan: Plan) -> int:
    return 0
