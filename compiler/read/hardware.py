"""Hardware facts: what `tuner doctor` finds, as plain data the compiler can read.

`tuner.runtime.doctor.collect()` asks torch (and DeepSpeed's op builders) and returns a
`HardwareFacts`; this module only defines it and moves it to and from JSON, so the
compiler, the estimator and the wizard use the same facts without importing torch.

Where facts come from, first match wins (`local_facts`):

1. ``$TUNER_HARDWARE_FACTS``: a JSON file of `HardwareFacts` (tests inject fake GPUs this
   way; CI can describe the target machine);
2. the facts `tuner doctor` saved on this machine (``hardware_facts.json`` in the cache
   directory), used only when they were taken on this host.

Settings that state the hardware (``hardware.platform``, ``hardware.gpu_memory_gib``,
``hardware.host_memory_gib``) win over both: that is how a compile elsewhere (CI) targets
another machine.
"""

from __future__ import annotations

import json
import os
import socket
import warnings
from dataclasses import asdict, dataclass, field, fields
from os import PathLike
from pathlib import Path
from typing import Any

FACTS_ENV = "TUNER_HARDWARE_FACTS"
FACTS_FILE = "hardware_facts.json"
GIB = 1024**3


@dataclass
class GpuInfo:
    index: int
    name: str
    memory_bytes: int
    compute_capability: str = ""
    """``"8.0"`` on CUDA; the gfx architecture on ROCm; empty elsewhere."""
    bf16: bool = False
    """Native bf16 (CUDA compute capability 8.0 or newer; ROCm MI200+; Apple M2+)."""


@dataclass
class DiskInfo:
    label: str
    """What the path is for (``output.dir``, ``deepspeed.nvme_path``, ...)."""
    path: str
    checked_path: str
    """The nearest existing directory that was measured (the path may not exist yet)."""
    free_bytes: int
    total_bytes: int


@dataclass
class OpInfo:
    """Whether a DeepSpeed C++/CUDA op can be used here."""

    name: str
    compatible: bool
    """DeepSpeed's own `is_compatible()`: the toolchain and libraries it needs are present."""
    prebuilt: bool = False
    """Installed pre-compiled (DS_BUILD_* at install time); else it is JIT-built on first use."""
    detail: str = ""


@dataclass
class HardwareFacts:
    platform: str = "cpu"
    """``cuda``, ``rocm``, ``mps`` or ``cpu``: the accelerator training would use."""
    gpus: list[GpuInfo] = field(default_factory=list)
    cuda_version: str = ""
    rocm_version: str = ""
    mps_available: bool = False
    nccl_version: str = ""
    p2p: list[list[bool]] = field(default_factory=list)
    """``p2p[i][j]``: GPU i can access GPU j's memory directly (NVLink / PCIe P2P)."""
    host_memory_bytes: int = 0
    host_available_bytes: int = 0
    cpu_cores: int = 0
    """Cores this process may use (affinity)."""
    disks: list[DiskInfo] = field(default_factory=list)
    ops: list[OpInfo] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    """Package -> version (empty string: not installed): torch, accelerate, deepspeed, ..."""
    hostname: str = ""
    python: str = ""
    os: str = ""
    source: str = "detected"
    """``detected`` (by `tuner doctor` here), ``injected`` (a file), or ``stated``."""
    warnings: list[str] = field(default_factory=list)

    # -- derived ----------------------------------------------------------------------
    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def gpu_memory_bytes(self) -> int:
        """The smallest GPU's memory (what every rank can count on); 0 without GPUs."""
        return min((g.memory_bytes for g in self.gpus), default=0)

    @property
    def bf16(self) -> bool:
        if self.platform == "cpu":
            return True  # CPU autocast supports bf16
        return bool(self.gpus) and all(g.bf16 for g in self.gpus)

    def op(self, name: str) -> OpInfo | None:
        return next((o for o in self.ops if o.name == name), None)

    # -- JSON -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HardwareFacts:
        """Facts from a parsed JSON object; ValueError when a field has the wrong type."""
        _check_types(cls, data)
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["gpus"] = [g if isinstance(g, GpuInfo) else GpuInfo(**_only(GpuInfo, g)) for g in data.get("gpus", [])]
        kwargs["disks"] = [d if isinstance(d, DiskInfo) else DiskInfo(**_only(DiskInfo, d)) for d in data.get("disks", [])]
        kwargs["ops"] = [o if isinstance(o, OpInfo) else OpInfo(**_only(OpInfo, o)) for o in data.get("ops", [])]
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> HardwareFacts:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("hardware facts must be a JSON object")
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | PathLike[str]) -> HardwareFacts:  # `os` is a field here
        """Facts from a file; `files.FileError` when it cannot be read, ValueError when it
        is not a facts file."""
        from .files import load_json

        data = load_json(path, "hardware facts file")
        if not isinstance(data, dict):
            raise ValueError("hardware facts must be a JSON object")
        return cls.from_dict(data)

    def report(self) -> str:
        """Plain-text report (what `tuner doctor` prints)."""
        gib = lambda n: f"{n / GIB:.1f} GiB"  # noqa: E731
        lines = [f"platform: {self.platform}" + (f"  (facts {self.source})" if self.source != "detected" else "")]
        if self.gpus:
            lines.append(f"GPUs: {self.gpu_count}")
            for g in self.gpus:
                cc = f", compute capability {g.compute_capability}" if g.compute_capability else ""
                lines.append(f"  [{g.index}] {g.name}: {gib(g.memory_bytes)}{cc}, bf16 {'yes' if g.bf16 else 'no'}")
        else:
            lines.append("GPUs: none")
        if self.cuda_version:
            lines.append(f"CUDA: {self.cuda_version}" + (f", NCCL {self.nccl_version}" if self.nccl_version else ""))
        if self.rocm_version:
            lines.append(f"ROCm (HIP): {self.rocm_version}" + (f", RCCL {self.nccl_version}" if self.nccl_version else ""))
        lines.append(f"MPS: {'available' if self.mps_available else 'not available'}")
        if len(self.gpus) > 1:
            if self.p2p:
                pairs = [(i, j) for i, row in enumerate(self.p2p) for j, ok in enumerate(row) if i != j]
                missing = [f"{i}->{j}" for i, j in pairs if not self.p2p[i][j]]
                lines.append("peer-to-peer: " + ("all pairs" if not missing else "missing " + ", ".join(missing)))
            else:
                lines.append("peer-to-peer: unknown")
        lines.append(f"host: {self.cpu_cores} cores, {gib(self.host_memory_bytes)} RAM "
                     f"({gib(self.host_available_bytes)} available)")
        for d in self.disks:
            where = d.path if d.path == d.checked_path else f"{d.path} (measured at {d.checked_path})"
            lines.append(f"disk {d.label}: {gib(d.free_bytes)} free of {gib(d.total_bytes)} at {where}")
        for o in self.ops:
            state = "prebuilt" if o.prebuilt else ("can be built" if o.compatible else "cannot be built")
            lines.append(f"DeepSpeed op {o.name}: {state}" + (f" ({o.detail})" if o.detail else ""))
        if self.versions:
            lines.append("versions: " + ", ".join(f"{k} {v or 'not installed'}" for k, v in self.versions.items()))
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _check_types(cls, data: Any) -> None:
    """Raise ValueError naming the first field whose value does not have its declared type
    (a hand-edited or truncated facts file must not reach the arithmetic)."""
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__} must be a JSON object")
    nested = {"GpuInfo": GpuInfo, "DiskInfo": DiskInfo, "OpInfo": OpInfo}
    for f in fields(cls):
        if f.name not in data:
            continue
        value, kind = data[f.name], str(f.type)
        if kind.startswith("list[") and kind[5:-1] in nested:
            if not isinstance(value, list):
                raise ValueError(f"{f.name} must be a list")
            for item in value:
                _check_types(nested[kind[5:-1]], item)
            continue
        ok = {
            "int": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
            "str": lambda v: isinstance(v, str),
            "bool": lambda v: isinstance(v, bool),
            "list[str]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
            "dict[str, str]": lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
            "list[list[bool]]": lambda v: isinstance(v, list) and all(
                isinstance(row, list) and all(isinstance(x, bool) for x in row) for row in v),
        }.get(kind, lambda v: True)
        if not ok(value):
            raise ValueError(f"{f.name} has the wrong type ({type(value).__name__}; expected {kind})")


def _only(cls, data: dict[str, Any]) -> dict[str, Any]:
    known = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in known}


# --- where facts come from ---------------------------------------------------------------

def facts_path() -> Path:
    from .block_cache import cache_dir

    return cache_dir() / FACTS_FILE


class FactsWarning(UserWarning):
    """A hardware facts file could not be used and was ignored."""


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:  # every compile asks several times; say it once
        _warned.add(message)
        warnings.warn(message, FactsWarning, stacklevel=3)


def _load_or_warn(path: str | os.PathLike, label: str, quiet_if_missing: bool) -> HardwareFacts | None:
    from ..parse import FileError

    try:
        return HardwareFacts.load(path)
    except FileError as exc:
        if not (quiet_if_missing and exc.missing):
            _warn_once(f"{exc.message}; ignoring the {label} (delete or fix it)")
    except (ValueError, TypeError) as exc:
        _warn_once(f"{label} {path} is not a valid facts file ({exc}); ignoring it (delete or fix it)")
    return None


def injected_facts() -> HardwareFacts | None:
    """Facts from the file named by ``$TUNER_HARDWARE_FACTS``, or None when it is unset, or
    when it cannot be used (a warning then says why, once)."""
    path = os.environ.get(FACTS_ENV, "").strip()
    if not path:
        return None
    facts = _load_or_warn(path, f"${FACTS_ENV} file", quiet_if_missing=False)
    if facts is not None:
        facts.source = "injected"
    return facts


def saved_facts() -> HardwareFacts | None:
    """What `tuner doctor` last saved on this host, or None (missing, unusable: warned once,
    other host)."""
    try:
        path = facts_path()
    except OSError:
        return None
    facts = _load_or_warn(path, "saved hardware facts", quiet_if_missing=True)
    return facts if facts is not None and facts.hostname == socket.gethostname() else None


def local_facts() -> HardwareFacts | None:
    """Injected facts, else the facts saved here by `tuner doctor`, else None."""
    return injected_facts() or saved_facts()


def save(facts: HardwareFacts) -> Path:
    """Keep the facts for the compiler (atomically, in the cache directory)."""
    from .files import write_atomic

    return write_atomic(facts_path(), facts.to_json())


def host_memory_bytes() -> tuple[int, int]:
    """(total, available) host RAM without torch or psutil; (0, 0) when unknown."""
    try:
        info = {}
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            info[key] = int(rest.split()[0]) * 1024
        return info.get("MemTotal", 0), info.get("MemAvailable", info.get("MemFree", 0))
    except (OSError, ValueError, IndexError):
        pass
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return int(total), 0
    except (ValueError, OSError, AttributeError):
        return 0, 0
