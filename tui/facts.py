"""Detected hardware as the wizard shows it, and paths as the wizard prints them.

`tuner doctor`'s HardwareFacts (or its dict, `HardwareFacts.to_dict()`) is read by its own
field names, so the wizard never imports torch to display it. Plain Python, no Textual.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..compiler.keys import paths as K
from ..compiler.read.hardware import GIB


def display_path(path: Path) -> str:
    """`path` relative to the working directory when it lies below it (shorter, and stable)."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _facts_dict(facts: Any) -> dict[str, Any]:
    """HardwareFacts as its dict (`to_dict()`); a dict is taken as that dict already."""
    return facts if isinstance(facts, dict) else facts.to_dict()


def describe_hardware(facts: Any) -> list[str]:
    """Lines describing detected hardware (`tuner doctor`'s HardwareFacts, or its dict)."""
    if facts is None:
        return ["detecting…"]
    if isinstance(facts, Exception):
        unavailable = type(facts).__name__ == "ServiceUnavailable"
        return [f"{'unavailable' if unavailable else 'detection failed'}: {facts}"]
    data = _facts_dict(facts)
    lines = [f"Platform: {data.get('platform', '?')}"
             + (f" (CUDA {data['cuda_version']})" if data.get("cuda_version") else "")
             + (f" (ROCm {data['rocm_version']})" if data.get("rocm_version") else "")]
    gpus = data.get("gpus") or []
    lines.append(f"GPUs: {len(gpus)}" if gpus else "GPUs: none")
    for i, g in enumerate(gpus):
        mem = (g.get("memory_bytes") or 0) / GIB
        cc = g.get("compute_capability")
        extra = (f", compute {cc}" if cc else "") + (", bf16" if g.get("bf16") else "")
        lines.append(f"  [{g.get('index', i)}] {g.get('name', 'GPU')}: {mem:.1f} GiB{extra}")
    host = (data.get("host_memory_bytes") or 0) / GIB
    cores = data.get("cpu_cores")
    if host or cores:
        lines.append("Host: " + ", ".join(p for p in (f"{cores} cores" if cores else "",
                                                      f"{host:.1f} GiB RAM" if host else "") if p))
    return lines


def hardware_suggestions(facts: Any) -> dict[str, Any]:
    """Settings the detected hardware suggests (applied only when the person asks)."""
    if facts is None or isinstance(facts, Exception):
        return {}
    data = _facts_dict(facts)
    out: dict[str, Any] = {}
    if data.get("platform") in ("cuda", "rocm", "mps", "cpu"):
        out[K.HARDWARE_PLATFORM] = data["platform"]
    gpus = data.get("gpus") or []
    if gpus:
        out[K.HARDWARE_NUM_PROCESSES] = len(gpus)
        mem = min((g.get("memory_bytes") or 0) / GIB for g in gpus)
        if mem:
            out[K.HARDWARE_GPU_MEMORY_GIB] = round(mem, 1)
        if all(g.get("bf16") for g in gpus):
            out[K.TRAINING_MIXED_PRECISION] = "bf16"  # the GPUs support it: no reason to run fp32
    host = (data.get("host_memory_bytes") or 0) / GIB
    if host:
        # Stated as the target's host RAM (the estimate never reads this machine's by itself).
        out[K.HARDWARE_HOST_MEMORY_GIB] = round(host, 1)
    return out
