"""Hardware doctor: what this machine offers for training, asked from torch itself.

`collect()` returns a `tuner.compiler.read.hardware.HardwareFacts`: GPUs (count, name, memory,
compute capability, bf16), CUDA / ROCm / MPS / CPU, the NCCL version, peer-to-peer access
between GPUs, host RAM and cores, free disk at the paths a run writes to, whether
DeepSpeed's CPU Adam and async I/O ops can be built, and the versions of the libraries a
run uses. `tuner doctor` prints it and saves it for the compiler (`hardware.save`); the
wizard's hardware step starts from it.

Every probe is guarded: a missing library or a failing driver call becomes a warning in
the facts, never an exception, because the doctor is what people run when things are wrong.
"""

from __future__ import annotations

import contextlib
import io
import os
import platform as _platform
import re
import shutil
import socket
import sys
from importlib import metadata
from pathlib import Path

from ..compiler.keys import paths as K
from ..compiler.keys.settings import Settings
from ..compiler.read.hardware import DiskInfo, GpuInfo, HardwareFacts, OpInfo, host_memory_bytes

PACKAGES = ("torch", "accelerate", "deepspeed", "transformers", "diffusers", "peft", "safetensors")
#: DeepSpeed op -> its builder class in deepspeed.ops.op_builder.
DEEPSPEED_OPS = {"cpu_adam": "CPUAdamBuilder", "async_io": "AsyncIOBuilder"}


def versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = ""
    return out


def _existing_parent(path: Path) -> Path:
    p = path.expanduser().absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def disk(label: str, path: str | os.PathLike) -> DiskInfo:
    """Free space where `path` is (or will be: the nearest existing parent is measured)."""
    checked = _existing_parent(Path(path))
    usage = shutil.disk_usage(checked)
    return DiskInfo(label, str(Path(path).expanduser().absolute()), str(checked), usage.free, usage.total)


def _cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


def _probe_gpus(facts: HardwareFacts) -> None:
    try:
        import torch
    except ImportError:
        facts.warnings.append("torch is not installed: GPUs cannot be detected (pip install torch)")
        return
    facts.cuda_version = torch.version.cuda or ""
    facts.rocm_version = getattr(torch.version, "hip", None) or ""
    try:
        facts.mps_available = bool(torch.backends.mps.is_available())
    except Exception:  # noqa: BLE001 - older builds without the MPS backend
        facts.mps_available = False
    try:
        cuda = torch.cuda.is_available()
    except Exception as exc:  # noqa: BLE001 - a broken driver raises here
        facts.warnings.append(f"torch.cuda.is_available() failed: {exc}")
        cuda = False
    if cuda:
        facts.platform = "rocm" if facts.rocm_version else "cuda"
        for i in range(torch.cuda.device_count()):
            try:
                props = torch.cuda.get_device_properties(i)
            except Exception as exc:  # noqa: BLE001
                facts.warnings.append(f"GPU {i}: cannot read its properties: {exc}")
                continue
            if facts.rocm_version:
                cc = getattr(props, "gcnArchName", "") or f"{props.major}.{props.minor}"
                bf16 = cc.startswith(("gfx90a", "gfx94", "gfx95", "gfx11", "gfx12"))
            else:
                cc = f"{props.major}.{props.minor}"
                bf16 = props.major >= 8
            facts.gpus.append(GpuInfo(i, props.name, int(props.total_memory), cc, bf16))
        try:
            nccl = torch.cuda.nccl.version()
            facts.nccl_version = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        except Exception as exc:  # noqa: BLE001
            facts.warnings.append(f"NCCL version unknown: {exc}")
        n = len(facts.gpus)
        if n > 1:
            try:
                facts.p2p = [[i == j or bool(torch.cuda.can_device_access_peer(i, j)) for j in range(n)]
                             for i in range(n)]
            except Exception as exc:  # noqa: BLE001
                facts.warnings.append(f"peer-to-peer access unknown: {exc}")
    elif facts.mps_available:
        facts.platform = "mps"
        facts.gpus.append(GpuInfo(0, "Apple MPS", facts.host_memory_bytes, "", _platform.machine() == "arm64"))
    else:
        facts.platform = "cpu"


def deepspeed_ops() -> tuple[list[OpInfo], list[str]]:
    """Whether DeepSpeed's CPU Adam and async I/O ops can be built here (DeepSpeed's own
    `is_compatible` checks: compiler, headers, libaio). Nothing is compiled."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            import deepspeed  # noqa: F401 - sets up the accelerator the builders ask
            from deepspeed.ops import op_builder
            try:
                from deepspeed.git_version_info import installed_ops
            except ImportError:
                installed_ops = {}
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken install
        return [OpInfo(name, False, False, f"deepspeed not importable: {exc}") for name in DEEPSPEED_OPS], []
    ops: list[OpInfo] = []
    warnings: list[str] = []
    for name, cls_name in DEEPSPEED_OPS.items():
        builder_cls = getattr(op_builder, cls_name, None)
        if builder_cls is None:
            ops.append(OpInfo(name, False, False, f"deepspeed has no {cls_name}"))
            continue
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                ok = bool(builder_cls().is_compatible(verbose=True))
        except Exception as exc:  # noqa: BLE001
            ok = False
            out.write(str(exc))
        text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue()).replace("[WARNING]", "")
        detail = " ".join(line.strip() for line in text.splitlines() if line.strip())[:300]
        ops.append(OpInfo(name, ok, bool(installed_ops.get(name)), "" if ok else detail))
    return ops, warnings


def collect(paths: dict[str, str] | None = None, probe_ops: bool = True) -> HardwareFacts:
    """The facts of this machine. `paths`: label -> directory whose free space to report
    (``output.dir``, ``deepspeed.nvme_path``); ``probe_ops=False`` skips DeepSpeed (1-2 s)."""
    total, available = host_memory_bytes()
    facts = HardwareFacts(
        host_memory_bytes=total, host_available_bytes=available, cpu_cores=_cpu_cores(),
        versions=versions(), hostname=socket.gethostname(),
        python=sys.version.split()[0], os=f"{_platform.system()} {_platform.release()} {_platform.machine()}",
        source="detected",
    )
    if not total:
        try:
            import psutil

            vm = psutil.virtual_memory()
            facts.host_memory_bytes, facts.host_available_bytes = int(vm.total), int(vm.available)
        except ImportError:
            facts.warnings.append("host memory unknown (no /proc/meminfo, psutil not installed)")
    _probe_gpus(facts)
    for label, path in (paths or {}).items():
        if not path:
            continue
        try:
            facts.disks.append(disk(label, path))
        except OSError as exc:
            facts.warnings.append(f"free disk at {label} ({path}) unknown: {exc}")
    if probe_ops:
        facts.ops, warnings = deepspeed_ops()
        facts.warnings += warnings
    return facts


def paths_from_settings(s: Settings, base_dir: Path | None = None) -> dict[str, str]:
    """The directories a run of settings `s` writes to (for the disk report)."""
    def resolve(p: str) -> str:
        path = Path(p).expanduser()
        return str(path if path.is_absolute() or base_dir is None else base_dir / path)

    out = {K.OUTPUT_DIR: resolve(s.output.dir)}
    if s.deepspeed.nvme_path:
        out[K.DEEPSPEED_NVME_PATH] = resolve(s.deepspeed.nvme_path)
    return out


def op_cache_line() -> str:
    """DeepSpeed's op cache: built, being built, stale locks (runtime/op_cache.py)."""
    try:
        from .op_cache import summary

        return summary()
    except Exception as exc:  # noqa: BLE001 - the doctor never fails on a probe
        return f"DeepSpeed op cache: unknown ({type(exc).__name__}: {exc})"
