"""Loading compiled artefacts with the real accelerate and DeepSpeed parsers.

The functions live in `tuner.runtime.verify`, which `tuner compile --verify` runs: the tests
and the command judge builds with the same code.
"""

from __future__ import annotations

from tuner.runtime.verify import (
    accelerate_filled,
    accelerate_launch_env,
    init_deepspeed_comm,
    load_accelerate,
    parse_deepspeed,
    pretend_cuda,
    verify_build,
)
