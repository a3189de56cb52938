"""Loading compiled artefacts with the real accelerate and DeepSpeed parsers.

The functions live in `tuner.compiler.artefacts.verify`, which `tuner compile --verify` runs: the tests
and the command judge builds with the same code.
"""

from __future__ import annotations

