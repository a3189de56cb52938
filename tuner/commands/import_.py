"""`tuner import SOURCE... [-o settings.toml]`: bring existing configs into tuner."""

from __future__ import annotations

import os
import sys
import tempfile

from tuner.compiler import compile_text
from tuner.compiler.diagnostics import render_text
from tuner.compiler.importer import ImportError_, import_files, to_toml


def run(args) -> int:
    if args.out.exists() and not args.force:
        print(f"{args.out}: error: already exists; choose another --out or pass --force", file=sys.stderr)
        return 2
    try:
        imported = import_files(list(args.sources))
    except ImportError_ as exc:  # unreadable: 2; unrecognised or no equivalent (ImportRefused): 1
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    text = to_toml(imported)
    result = compile_text(text, path=args.out.resolve())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{args.out.name}.", dir=args.out.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, args.out)
    for remark in imported.remarks:
        print(f"note: {remark}")
    print(f"wrote {args.out}")
    problems = [d for d in result.diagnostics.items if d.severity != "note"]
    if problems:
        print(render_text(problems), file=sys.stderr if not result.diagnostics.ok else sys.stdout)
    if not result.diagnostics.ok:
        print(f"{args.out} does not compile yet; fix the errors above, then run `tuner compile {args.out}`",
              file=sys.stderr)
        return 1
    return 0
