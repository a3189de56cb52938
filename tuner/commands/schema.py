"""`tuner schema [KEY]`: the settings schema, or one key's documentation."""

from __future__ import annotations

import json
import sys

from tuner.compiler.diagnostics import EXIT_OK, EXIT_USAGE
from tuner.compiler.schema import index, load_schema


def run(args) -> int:
    if not args.key:
        print(json.dumps(load_schema(), indent=2))
        return EXIT_OK
    idx = index()
    path = idx.aliases.get(args.key, args.key)
    info = idx.keys.get(path)
    if info is None:
        hints = idx.suggest(args.key)
        print(f"unknown key {args.key!r}" + (f"; did you mean {' or '.join(hints)}?" if hints else ""), file=sys.stderr)
        return EXIT_USAGE
    print(f"{info.path}  ({info.prop['type']}, default {json.dumps(info.default)})")
    print(f"  {info.description}")
    if info.enum:
        print(f"  choices: {', '.join(map(str, info.enum))}")
    if info.aliases:
        print(f"  aliases: {', '.join(info.aliases)}")
    return EXIT_OK
