"""Build DeepSpeed's CPU ops once, before the tests that need them, and say how long it took.

    python scripts/build_ops.py          (scripts/test.sh runs it after the install)
    python scripts/build_ops.py --warm   (exit 0 when every op is built already, else 1; nothing built)

scripts/test.sh runs it in the background beside the tests that start no rank when the ops
are not built yet: each finished op is appended to $TUNER_OPS_PROGRESS, which tests/ops_wait.py
reads before a test starts DeepSpeed ranks (the shared-memory collectives and CPU Adam come
first; async I/O, most of a fresh build, is needed by the NVMe tests only).

Only the ops the suite uses (each is JIT-built by DeepSpeed on first use otherwise):

* CPU Adam: ZeRO-Offload (`offload_optimizer = "cpu"`): tests/runtime/test_strategies.py
  [zero2_offload], the plain-script checks of zero2_offload and zero3_nvme
  (tests/compiler/test_standard_artefacts.py, test_offload_plain_script.py), `tuner check`'s
  rehearsal of examples/zero2_offload.toml;
* the shared-memory collectives: every DeepSpeed rank on CPU (DeepSpeed's TorchBackend loads
  the op when it starts, so every ZeRO test);
* async I/O and its pinned-memory helper: NVMe offload, one test only
  (test_standard_artefacts.py[zero3_nvme]); built where libaio's headers are present
  (scripts/system-packages.sh). It is most of a fresh build's time (12 files that each parse
  torch's headers).

torch compiles them into $TORCH_EXTENSIONS_DIR (scripts/bootstrap.sh sets it inside .venv/: an
op's build records the virtual environment's paths). Each op's files compile in parallel
(ninja; $MAX_JOBS, default the number of cores + 2); the ops one after another, since the
cores are already busy. A warm rerun (every op's library present, a stamp with the same
DeepSpeed, torch, Python and libaio) skips everything without importing DeepSpeed or torch.
Exit 0 always: an op that does not build is reported, and the tests that need it report it again.
"""

from __future__ import annotations

import json
import os
import sys
import time
from importlib import metadata
from pathlib import Path

#: (builder class, the op's library name, what it is for)
OPS = [("ShareMemCommBuilder", "deepspeed_shm_comm", "shared-memory collectives"),
       ("CPUAdamBuilder", "cpu_adam", "CPU Adam"),
       ("PinMemoryBuilder", "pin_memory", "pinned memory (NVMe offload)"),
       ("AsyncIOBuilder", "async_io", "async I/O (NVMe offload)")]
NVME_OPS = ("PinMemoryBuilder", "AsyncIOBuilder")
STAMP = ".tuner-ops.json"
LIBAIO_HEADER = Path("/usr/include/libaio.h")


def extensions_dir() -> Path:
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR", "~/.cache/torch_extensions")).expanduser()


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def fingerprint() -> dict:
    """What a build depends on, read without importing DeepSpeed or torch."""
    return {"deepspeed": _version("deepspeed"), "torch": _version("torch"), "python": sys.executable,
            "libaio": LIBAIO_HEADER.is_file()}


def warm(where: Path, key: dict) -> str | None:
    """The stamp's summary when every op it lists as built is still there and nothing changed."""
    try:
        stamp = json.loads((where / STAMP).read_text())
    except (OSError, ValueError):
        return None
    if stamp.get("key") != key:
        return None
    if not all((where / lib / f"{lib}.so").is_file() for lib in stamp.get("built", [])):
        return None
    return str(stamp.get("summary", ""))


def build(where: Path) -> tuple[list[str], list[str]]:
    """Load (building where needed) every op; returns (libraries built, one part per op)."""
    import deepspeed.ops  # noqa: F401  (compatibility of every op is checked on import)
    from deepspeed.accelerator import get_accelerator

    built, parts = [], []
    for name, lib, what in OPS:
        builder = get_accelerator().create_op_builder(name)
        if builder is None:
            continue
        if not builder.is_compatible(verbose=False):
            parts.append(f"{what}: not buildable here" + (" (no libaio-dev)" if name in NVME_OPS else ""))
            continue
        print(f"DeepSpeed op {builder.NAME}: building or loading ({what}) ...", flush=True)
        t0 = time.monotonic()
        try:
            builder.load(verbose=False)
        except Exception as exc:  # noqa: BLE001
            parts.append(f"{what}: FAILED ({type(exc).__name__}: {str(exc)[-200:]})")
            continue
        built.append(lib)
        parts.append(f"{what} {time.monotonic() - t0:.0f} s")
        _progress(lib)
    return built, parts


def _progress(line: str) -> None:
    """One finished op (or "all") appended to $TUNER_OPS_PROGRESS: what tests/ops_wait.py reads
    while scripts/test.sh runs this beside the first tests."""
    path = os.environ.get("TUNER_OPS_PROGRESS")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def main() -> int:
    try:
        return _main()
    finally:
        _progress("all")


def _main() -> int:
    where, key, started = extensions_dir(), fingerprint(), time.monotonic()
    if not key["deepspeed"]:
        print("DeepSpeed ops: not built (DeepSpeed is not installed)")
        return 0
    summary = warm(where, key)
    if summary is not None:
        print(f"DeepSpeed ops already built in {where} (when built: {summary}); nothing to do "
              f"(delete {where / STAMP} to load and check them again)", flush=True)
        return 0
    try:
        built, parts = build(where)
    except Exception as exc:  # noqa: BLE001 - broken install: the tests say so
        print(f"DeepSpeed ops: not built ({type(exc).__name__}: {exc})")
        return 0
    summary = "; ".join(parts)
    print(f"DeepSpeed ops ready in {time.monotonic() - started:.0f} s ({summary}) in {where}; "
          "a build left half-done by a killed run leaves a 'lock' file there that makes later builds wait: "
          "delete it", flush=True)
    if not any("FAILED" in p for p in parts):
        where.mkdir(parents=True, exist_ok=True)
        (where / STAMP).write_text(json.dumps({"key": key, "built": built, "summary": summary}) + "\n")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--warm"]:
        sys.exit(0 if not _version("deepspeed") or warm(extensions_dir(), fingerprint()) is not None else 1)
    sys.exit(main())
