"""`tuner schema [KEY]`: the settings schema, or one key's documentation;
`tuner schema --write`: regenerate the committed schema files from the declaration."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..compiler.diagnostics import EXIT_OK, EXIT_USAGE
from ..compiler.keys.schema import index, load_schema


def write(directory: Path | None = None) -> list[Path]:
    """Write each generated schema file whose text changed; return those written."""
    from .. import schemas
    from ..compiler.keys import schema_gen

    directory = directory or Path(schemas.__file__).resolve().parent
    written = []
    for name, text in schema_gen.files().items():
        target = directory / name
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            written.append(target)
    return written


def run(args) -> int:
    if getattr(args, "write", False):
        if args.key:
            print("tuner schema --write takes no KEY", file=sys.stderr)
            return EXIT_USAGE
        written = write()
        print("\n".join(f"wrote {p}" for p in written) or "schema files already up to date")
        return EXIT_OK
    if not args.key:
        from ..compiler.keys.schema_gen import render

        sys.stdout.write(render(load_schema()))  # the committed file's exact text
        return EXIT_OK
    idx = index()
    path = idx.aliases.get(args.key, args.key)
    info = idx.keys.get(path)
    if info is None and args.key in idx.sections:
        return _section(idx, args.key)
    if info is None:
        hints = [h for h in idx.suggest(args.key) if h != args.key]
        print(f"unknown key {args.key!r}" + (f"; did you mean {' or '.join(hints)}?" if hints else ""), file=sys.stderr)
        return EXIT_USAGE
    print(f"{info.path}  ({info.prop['type']}, default {json.dumps(info.default)})")
    print(f"  {info.description}")
    if info.enum:
        print(f"  choices: {', '.join(map(str, info.enum))}")
    if info.aliases:
        print(f"  aliases: {', '.join(info.aliases)}")
    return EXIT_OK


def _section(idx, section: str) -> int:
    """`tuner schema fsdp`: the section's description, then one line per key."""
    print(f"[{section}]  {idx.sections[section].get('description', '')}".rstrip())
    for info in idx.keys.values():
        if info.section == section:
            summary = info.description.split(". ")[0].rstrip(".")
            print(f"  {info.name}  ({info.prop['type']}, default {json.dumps(info.default)})  {summary}")
    print(f"`tuner schema {section}.KEY` shows one key in full")
    return EXIT_OK
