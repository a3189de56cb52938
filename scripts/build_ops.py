"""Build DeepSpeed's CPU ops once, before the tests that need them, and say how long it took.

    python scripts/build_ops.py          (scripts/test.sh runs it after the install)

Ops: CPU Adam (ZeRO-Offload), the shared-memory collectives DeepSpeed's communication layer
builds on CPU, and async I/O with its pinned-memory helper (NVMe offload) where libaio's
headers are present (scripts/system-packages.sh). torch compiles them into
$TORCH_EXTENSIONS_DIR (scripts/bootstrap.sh sets it inside .venv/: an op's build records the
virtual environment's paths, so environments at different paths sharing one folder would
rebuild each other's ops). A built op loads in a second. Exit 0 always: an op that does not
build is reported, and the tests that need it report it again.
"""

from __future__ import annotations

import os
import sys
import time

OPS = [("CPUAdamBuilder", "CPU Adam"), ("ShareMemCommBuilder", "shared-memory collectives"),
       ("AsyncIOBuilder", "async I/O (NVMe offload)")]


def main() -> int:
    try:
        import deepspeed.ops  # noqa: F401  (compatibility of every op is checked on import)
        from deepspeed.accelerator import get_accelerator
    except Exception as exc:  # noqa: BLE001 - not installed, or broken: the tests say so
        print(f"DeepSpeed ops: not built ({type(exc).__name__}: {exc})")
        return 0
    where = os.environ.get("TORCH_EXTENSIONS_DIR", "~/.cache/torch_extensions")
    parts, started = [], time.monotonic()
    for name, what in OPS:
        builder = get_accelerator().create_op_builder(name)
        if builder is None:
            continue
        if not builder.is_compatible(verbose=False):
            parts.append(f"{what}: not buildable here" + (" (no libaio-dev)" if name == "AsyncIOBuilder" else ""))
            continue
        print(f"DeepSpeed op {builder.NAME}: building or loading ({what}) ...", flush=True)
        t0 = time.monotonic()
        try:
            builder.load(verbose=False)
        except Exception as exc:  # noqa: BLE001
            parts.append(f"{what}: FAILED ({type(exc).__name__}: {str(exc)[-200:]})")
            continue
        parts.append(f"{what} {time.monotonic() - t0:.0f} s")
    print(f"DeepSpeed ops ready in {time.monotonic() - started:.0f} s ({'; '.join(parts)}) in {where}; "
          "a build left half-done by a killed run leaves a 'lock' file there that makes later builds wait: "
          "delete it", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
