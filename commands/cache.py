"""`tuner cache clear [detection|offload|all] [SETTINGS]`: maintenance of tuner's caches.

``detection`` empties the block-detection cache; ``offload`` removes stale DeepSpeed
offload swap directories under the settings' NVMe path (the runtime's maintenance helper).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..compiler.diagnostics import EXIT_OK, EXIT_USAGE


def run(args) -> int:
    if getattr(args, "cache_command", None) != "clear":
        print("usage: tuner cache clear [detection|offload|all] [SETTINGS]", file=sys.stderr)
        return EXIT_USAGE
    status = EXIT_OK
    if args.which in ("detection", "all"):
        from ..compiler.read import block_cache

        folder = block_cache.cache_dir()
        if folder.exists() and not folder.is_dir():
            where = f"${block_cache.CACHE_ENV}" if os.environ.get(block_cache.CACHE_ENV) else "the cache path"
            print(f"tuner cache clear: error: {where} names {folder}, which is not a directory; "
                  "point it at a directory (or unset it)", file=sys.stderr)
            return EXIT_USAGE
        count = block_cache.clear()
        print(f"cleared the block-detection cache ({count} entr{'y' if count == 1 else 'ies'}): {block_cache.cache_path()}")
    if args.which in ("offload", "all"):
        path = _offload_path(args.settings)
        if path is None:
            msg = "no DeepSpeed NVMe path: give the settings file whose deepspeed.nvme_path to clean"
            if args.which == "offload":
                print(f"tuner cache clear offload: error: {msg}", file=sys.stderr)
                return EXIT_USAGE
            print(f"offload cache: skipped ({msg})")
            return status
        try:
            from ..runtime.maintenance import clear_offload_cache
        except ImportError as exc:
            print(f"tuner cache clear offload: error: the runtime's maintenance helper is missing ({exc})",
                  file=sys.stderr)
            return EXIT_USAGE
        removed = list(clear_offload_cache(path) or [])
        print(f"cleared the DeepSpeed offload cache at {path}: removed {len(removed)} swap folder(s)")
        for p in removed:
            print(f"  {p}")
    return status


def _offload_path(settings: Path | None) -> str | None:
    if settings is None:
        return None
    from ..compiler.compile import compile_file
    from ..compiler.read.source import SourceError

    try:
        result = compile_file(settings)
    except SourceError:
        return None
    s = result.settings
    if s is None:
        return None
    raw = s.deepspeed.config if isinstance(s.deepspeed.config, dict) else {}
    zero = raw.get("zero_optimization", {}) if isinstance(raw.get("zero_optimization"), dict) else {}
    text = s.deepspeed.nvme_path or next((str(b.get("nvme_path")) for b in
                                          (zero.get("offload_param"), zero.get("offload_optimizer"))
                                          if isinstance(b, dict) and b.get("nvme_path")), "")
    if not text:
        return None
    p = Path(text).expanduser()
    return str(p if p.is_absolute() else settings.resolve().parent / p)
