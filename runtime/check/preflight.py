"""Launch checks on this machine, before any rank starts (no torch import on CPU targets).

`machine_facts` gathers what this machine has (build hash, versions, script, paths,
output directory, disk, RAM, interfaces, GPUs) as plain JSON data; `local_findings`
judges them against the plan; `cross_findings` compares the machines' facts after the
exchange (`exchange.py`). Every finding names the machine and the fix.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...compiler.artefacts.emit import MANIFEST_JSON
from ...compiler.keys import paths as K
from .findings import Finding, fault, ok, skipped

if TYPE_CHECKING:
    from ..artefacts import Artefacts

VERSIONED = ("tuner", "torch", "accelerate", "deepspeed", "transformers")
GIB = 1024**3


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def checkpoint_bytes(est) -> int:
    """One checkpoint of the plan: fp32 parameters plus Adam's two fp32 moments of the
    trainable ones (an upper bound for SGD and for bf16 weights); 0 when the model size is unknown."""
    if est is None or est.model is None:
        return 0
    n = int(est.model.parameters)
    return n * 4 + n * 8


def _estimate(arts: Artefacts):
    from ...compiler.memory.estimate import estimate

    try:
        return estimate(arts.settings, arts.plan, None, base_dir=arts.base_dir, ds_config=arts.deepspeed_config())
    except Exception:  # noqa: BLE001 - an estimate that fails leaves disk/RAM unchecked, said in the report
        return None


def _host_available() -> tuple[int, str]:
    """Available host RAM: an injected facts file ($TUNER_HARDWARE_FACTS) states it for a
    machine described elsewhere; else /proc/meminfo's MemAvailable."""
    from ...compiler.read import hardware

    facts = hardware.injected_facts()
    if facts is not None and (facts.host_available_bytes or facts.host_memory_bytes):
        return int(facts.host_available_bytes or facts.host_memory_bytes), "$TUNER_HARDWARE_FACTS"
    return hardware.host_memory_bytes()[1], "/proc/meminfo"


def _writable(d: Path) -> str:
    """'' when a file can be created in `d` (or `d` itself, when it does not exist yet), else why
    not. The probe is a uniquely named entry, removed again: a check leaves nothing behind, and
    machines that share the folder (a network file system, or several on one host) never touch
    each other's probes. (Creating `d` and removing it again would pull it away from under
    another machine's probe.)"""
    existing = next((p for p in [d, *d.parents] if p.exists()), None)
    if existing is None:  # pragma: no cover - the root always exists
        return f"no existing parent folder ({d})"
    if not existing.is_dir():
        return f"Not a directory: {existing} is a file ({d})"
    try:
        if existing == d:
            with tempfile.NamedTemporaryFile(dir=d, prefix=".tuner-check-"):
                pass
        else:
            os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".tuner-check-"))
        return ""
    except OSError as exc:
        return f"{exc.strerror or exc} ({d})"


def _route_interfaces() -> list[str]:
    try:
        rows = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return []
    return sorted({r.split()[0] for r in rows if r.split() and r.split()[0] != "lo"})


def _gpu_facts() -> dict[str, Any]:
    import glob

    if not (os.path.exists("/proc/driver/nvidia") or glob.glob("/dev/nvidia*") or os.path.exists("/dev/kfd")):
        return {"count": 0, "memory": [], "nccl": None}  # no GPU driver: no torch import needed to say so
    try:
        import torch
    except ImportError:
        return {"count": 0, "memory": [], "nccl": None}
    if not torch.cuda.is_available():
        return {"count": 0, "memory": [], "nccl": None}
    mem = [torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count())]
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # noqa: BLE001 - no NCCL in this build of torch
        nccl = None
    return {"count": len(mem), "memory": mem, "nccl": nccl}


def machine_facts(build_dir: Path, target: list[str] | None, machine: int) -> dict[str, Any]:
    """What this machine has, for the checks here and the comparison across machines."""
    from ..artefacts import RunError, load

    facts: dict[str, Any] = {"machine": machine, "host": socket.gethostname(),
                             "versions": {n: _version(n) for n in VERSIONED}}
    if target:
        if target[0] == "-m":
            try:
                facts["script"] = {"name": target[1], "found": importlib.util.find_spec(target[1]) is not None}
            except (ImportError, ValueError):
                facts["script"] = {"name": target[1], "found": False}
        else:
            facts["script"] = {"name": target[0], "found": Path(target[0]).is_file()}
    try:
        arts = load(build_dir)
    except RunError as exc:
        facts["build_error"] = exc.message
        return facts
    facts["build_hash"] = hashlib.sha256((arts.build_dir / MANIFEST_JSON).read_bytes()).hexdigest()
    facts["compiled_versions"] = {n: arts.manifest.get("versions", {}).get(n) for n in VERSIONED}
    s = arts.settings
    paths = {}
    if not s.model.path.startswith("builtin"):
        paths[K.MODEL_PATH] = s.model.path
    for key in ("path", "validation_path"):
        value = getattr(s.data, key)
        if value and not value.startswith("builtin"):
            paths[f"data.{key}"] = value
    facts["paths"] = {k: {"path": str(_resolve(arts, v)), "exists": _resolve(arts, v).exists()}
                      for k, v in paths.items()}
    nvme = {s.deepspeed.nvme_path} if "nvme" in (s.deepspeed.offload_optimizer, s.deepspeed.offload_param) else set()
    # a path that belongs to the training machines: the compile elsewhere only noted it (issue 37)
    facts["nvme"] = {str(_resolve(arts, v)): _nvme_problem(_resolve(arts, v)) for v in sorted(nvme) if v}
    out = arts.output_dir
    facts["output"] = {"dir": str(out), "problem": _writable(out)}
    existing = next((p for p in [out, *out.parents] if p.exists()), None)
    facts["output"]["free"] = shutil.disk_usage(existing).free if existing else 0
    est = _estimate(arts)
    facts["checkpoint_bytes"] = checkpoint_bytes(est)
    facts["per_host_bytes"] = int(est.chosen.per_host) if est is not None and est.chosen is not None else 0
    facts["ram_available"], facts["ram_source"] = _host_available()
    facts["interfaces"] = sorted(name for _, name in socket.if_nameindex())
    facts["routes"] = _route_interfaces()
    facts["ifname_env"] = {k: os.environ[k] for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if os.environ.get(k)}
    if arts.plan.platform in ("cuda", "rocm"):
        facts["gpus"] = _gpu_facts()
    return facts


def _nvme_problem(d: Path) -> str:
    """'' when `d` is an existing directory a file can be created in, else why not."""
    return f"{d} does not exist or is not a directory" if not d.is_dir() else _writable(d)


def _resolve(arts: Artefacts, value: str) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else arts.base_dir / p


def _known_faults(arts: Artefacts, m: str) -> list[Finding]:
    """The compiler's known-fault warnings (compiler/review/known_faults.py), kept in the manifest."""
    from ...compiler.review.known_faults import FIXES, KNOWN

    if arts is None:
        return []
    found = [d for d in arts.manifest.get("diagnostics") or [] if str(d.get("message", "")).startswith(KNOWN)]
    if not found:
        return [ok("known-faults", m, "no known silent fault for this plan and these versions")]
    return [fault("known-faults", m, f"[{d['key']}] {d['message'][len(KNOWN):]}",
                  FIXES.get(d["key"], f"change {d['key']} as tuner compile's warning says") + ", then recompile")
            for d in found]


def local_findings(f: dict[str, Any], arts: Artefacts | None) -> list[Finding]:
    """Judge one machine's facts against the plan (`arts`: the build as loaded here, or None)."""
    m = f"machine {f['machine']}"
    out: list[Finding] = []
    if "build_error" in f or arts is None:
        return [fault("build", m, f.get("build_error", "the build did not load"),
                      "copy the build directory to this machine (the same path), "
                      "or compile the same settings here with `tuner compile`")]
    out.append(ok("build", m, f"manifest {f['build_hash'][:12]}"))
    compiled = f.get("compiled_versions") or {}
    wrong = [f"{n} {f['versions'][n]} (compiled with {compiled[n]})" for n in VERSIONED
             if compiled.get(n) and f["versions"].get(n) and compiled[n] != f["versions"][n]]
    if wrong:
        out.append(fault("versions", m, "installed " + ", ".join(wrong),
                         "install the versions the build was compiled with on every machine, or recompile "
                         "with this environment"))
    else:
        out.append(ok("versions", m, ", ".join(f"{n} {v}" for n, v in f["versions"].items() if v)))
    out += _known_faults(arts, m)
    if "script" in f:
        sc = f["script"]
        out.append(ok("script", m, f"{sc['name']} found") if sc["found"] else
                   fault("script", m, f"{sc['name']} not found (working directory {os.getcwd()})",
                         "copy the script to the same path on every machine (or install the module)"))
    for key, check in ((K.MODEL_PATH, "model-path"), (K.DATA_PATH, "data-path"), (K.DATA_VALIDATION_PATH, "data-path")):
        p = (f.get("paths") or {}).get(key)
        if p is None:
            continue
        out.append(ok(check, m, f"{key} {p['path']} exists") if p["exists"] else
                   fault(check, m, f"{key} {p['path']} does not exist",
                         f"copy it to {p['path']} on this machine or set {key} to where it is, then recompile"))
    o = f["output"]
    for path, problem in (f.get("nvme") or {}).items():
        out.append(fault("nvme-path", m, f"deepspeed.nvme_path: {problem}",
                         f"create it (mkdir -p {path}) on a fast local disk of this machine") if problem
                   else ok("nvme-path", m, f"deepspeed.nvme_path {path} writable"))
    out.append(fault("output", m, f"cannot write the output directory: {o['problem']}",
                     "make output.dir writable on this machine or point it elsewhere, then recompile")
               if o["problem"] else ok("output", m, f"{o['dir']} writable"))
    need = f.get("checkpoint_bytes") or 0
    if not need:
        out.append(skipped("disk", m, "the model size is unknown: no checkpoint size to check"))
    elif o["free"] < need:
        out.append(fault("disk", m, f"{_gib(o['free'])} free at {o['dir']}, one checkpoint needs about {_gib(need)}",
                         "free space there or set output.dir to a larger disk, then recompile"))
    else:
        out.append(ok("disk", m, f"{_gib(o['free'])} free, one checkpoint about {_gib(need)}"))
    ram, per_host = f.get("ram_available") or 0, f.get("per_host_bytes") or 0
    if not ram or not per_host:
        out.append(skipped("host-ram", m, "available RAM or the estimate unknown"))
    elif ram < per_host:
        out.append(fault("host-ram", m, f"{_gib(ram)} RAM available ({f['ram_source']}), the plan needs about "
                         f"{_gib(per_host)} per host",
                         "free memory, use fewer ranks per machine, or turn on RAM-efficient loading "
                         "(fsdp.cpu_ram_efficient_loading / deepspeed.zero3_init); `tuner estimate` shows what fits"))
    else:
        out.append(ok("host-ram", m, f"{_gib(ram)} available, the plan needs about {_gib(per_host)}"))
    out += _interface_findings(f, m, arts)
    out += _gpu_findings(f, m, arts)
    return out


def _interface_findings(f: dict[str, Any], m: str, arts: Artefacts) -> list[Finding]:
    out = []
    for var, value in f.get("ifname_env", {}).items():
        names = [n.lstrip("=") for n in value.lstrip("^").split(",") if n]
        missing = [n for n in names if not value.startswith("^") and not any(i.startswith(n) for i in f["interfaces"])]
        if missing:
            out.append(fault("network-interface", m, f"${var}={value} names no interface of this machine "
                             f"(it has {', '.join(f['interfaces'])})",
                             f"set {var} to the interface that reaches machine 0, or unset it"))
    if out:
        return out
    topo = arts.manifest.get("topology", {}) if arts is not None else {}
    if int(topo.get("num_machines", 1) or 1) > 1 and len(f.get("routes", [])) > 1 and not f.get("ifname_env"):
        return [fault("network-interface", m, f"several routes ({', '.join(f['routes'])}) and neither "
                      "GLOO_SOCKET_IFNAME nor NCCL_SOCKET_IFNAME is set",
                      "export NCCL_SOCKET_IFNAME (GPUs) / GLOO_SOCKET_IFNAME (CPU) = the interface that reaches "
                      "machine 0, on every machine")]
    return [ok("network-interface", m, ", ".join(f"{k}={v}" for k, v in f.get("ifname_env", {}).items())
               or f"routes: {', '.join(f.get('routes', [])) or 'loopback only'}")]


def _gpu_findings(f: dict[str, Any], m: str, arts: Artefacts) -> list[Finding]:
    g = f.get("gpus")
    if g is None:
        return [skipped("gpus", m, "not a GPU target")]
    want = int(arts.plan.processes_per_machine)
    if g["count"] < want:
        return [fault("gpus", m, f"{g['count']} GPU(s) visible, the plan starts {want} ranks on this machine",
                      "check CUDA_VISIBLE_DEVICES and the scheduler's GPU request, or compile with "
                      "hardware.num_processes matching the GPUs")]
    stated = arts.settings.hardware.gpu_memory_gib
    small = min(g["memory"][:want]) if g["memory"] else 0
    if stated and small < stated * GIB * 0.95:
        return [fault("gpus", m, f"smallest GPU has {_gib(small)}, the settings state {stated} GiB",
                      "set hardware.gpu_memory_gib to the real size and recompile (the estimate depends on it)")]
    return [ok("gpus", m, f"{g['count']} GPU(s), smallest {_gib(small)}, NCCL {g['nccl']}")]


def cross_findings(all_facts: list[dict[str, Any]]) -> list[Finding]:
    """Compare the machines' facts: the same build, versions and NCCL everywhere."""
    out: list[Finding] = []
    if len(all_facts) < 2:
        return out
    first = all_facts[0]
    for f in all_facts[1:]:
        m = f"machine {f['machine']}"
        if "build_hash" in first and "build_hash" in f and f["build_hash"] != first["build_hash"]:
            out.append(fault("same-build", m, f"manifest {f['build_hash'][:12]}, machine 0 has {first['build_hash'][:12]}",
                             "copy machine 0's build directory to every machine (or compile the same settings "
                             "with the same tuner on each)"))
        diff = [f"{n} {f['versions'].get(n)} (machine 0: {first['versions'].get(n)})" for n in VERSIONED
                if f["versions"].get(n) != first["versions"].get(n)]
        if diff:
            out.append(fault("versions", m, "differs from machine 0: " + ", ".join(diff),
                             "install the same versions on every machine"))
        g0, g = first.get("gpus") or {}, f.get("gpus") or {}
        if g0.get("nccl") and g.get("nccl") and g0["nccl"] != g["nccl"]:
            out.append(fault("gpus", m, f"NCCL {g['nccl']}, machine 0 has {g0['nccl']}",
                             "install the same torch (with its NCCL) on every machine"))
    if not out:
        out.append(ok("same-build", "all", f"{len(all_facts)} machines: same manifest and versions"))
    return out


def bind_problem(address: str, port: int) -> tuple[str, str] | None:
    """(check, what happened) when machine 0 cannot listen at address:port, else None."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((address, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return "port", f"port {port} at {address} is already in use"
            return "address", f"cannot listen at {address}:{port}: {exc.strerror or exc}"
    return None
