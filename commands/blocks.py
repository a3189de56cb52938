"""`tuner blocks MODEL`: module classes, parameter totals and suggested FSDP wrap classes.

A cached result (fresh: the model's config file unchanged) is printed without importing
torch; otherwise the model is built on the meta device (`tuner.runtime.blocks`, which
imports torch only when it builds).
"""

from __future__ import annotations

import json
import sys
import warnings

from ..compiler.diagnostics import EXIT_OK, EXIT_USAGE


def run(args) -> int:
    from ..compiler.read import block_cache

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", block_cache.CacheWarning)
        from ..runtime.blocks import DetectionError, detect

        try:
            result = detect(args.model, family=args.family, flavour=args.flavour, refresh=args.refresh)
        except DetectionError as exc:
            _warn(caught)
            if args.json:
                print(json.dumps({"ok": False, "error": str(exc)}, indent=2))
            else:
                print(f"tuner blocks: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    _warn(caught)
    if args.json:
        print(json.dumps({"ok": True, **result.to_dict()}, indent=2, sort_keys=True))
    else:
        print(result.table())
    return EXIT_OK


def _warn(caught) -> None:
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
