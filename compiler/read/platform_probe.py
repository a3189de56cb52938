"""Which platform is this machine? Answered without importing torch.

`tuner compile` must stay fast and torch-free, so this looks at the operating system and
the device files and tools the GPU stacks install. `tuner doctor` asks torch for the full
picture; this is only enough for the compiler's platform rules when the settings say
``hardware.platform = "auto"``.
"""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path
from typing import Any


def detect_platform(facts: Any) -> str:
    """'cuda', 'rocm', 'mps' or 'cpu' for the machine this runs on. `facts`: this host's
    `hardware.HardwareFacts` as the caller read them (`hardware.local_facts()`), or None when
    there are none; this reads no facts file itself (the gather stage, `gather.gather`, does)."""
    forced = os.environ.get("TUNER_PLATFORM", "").strip().lower()
    if forced in ("cuda", "rocm", "mps", "cpu"):
        return forced
    if facts is not None and facts.platform in ("cuda", "rocm", "mps", "cpu"):
        return facts.platform
    if platform.system() == "Darwin":
        return "mps" if platform.machine() == "arm64" else "cpu"
    if Path("/dev/kfd").exists() or shutil.which("rocm-smi"):
        return "rocm"
    if Path("/dev/nvidia0").exists() or Path("/proc/driver/nvidia/gpus").is_dir():
        return "cuda"
    return "cpu"
