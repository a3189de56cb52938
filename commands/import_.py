"""`tuner import SOURCE... [-o settings.toml]`: bring existing configs into tuner."""

from __future__ import annotations

import sys
from pathlib import Path

from ..compiler.compile import compile_text
from ..compiler.diagnostics import EXIT_INVALID, EXIT_OK, EXIT_USAGE, render_text
from ..compiler.formats.importer import ImportError_, import_files, to_toml
from ..compiler.read.files import MAX_CONFIG_BYTES, describe_os_error, write_atomic


def run(args) -> int:
    out: Path = args.out
    if out.is_dir():
        print(f"{out}: error: is a directory; give the settings file to write, e.g. -o {out / 'settings.toml'}",
              file=sys.stderr)
        return EXIT_USAGE
    if out.exists() or out.is_symlink():
        if not args.force:
            print(f"{out}: error: already exists; choose another --out or pass --force", file=sys.stderr)
            return EXIT_USAGE
        if not out.is_file():
            print(f"{out}: error: exists and is not a regular file; --force replaces settings files only",
                  file=sys.stderr)
            return EXIT_USAGE
    try:
        imported = import_files(list(args.sources))
        text = to_toml(imported)
    except ImportError_ as exc:  # unreadable: 2; unrecognised or no equivalent (ImportRefused): 1
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except (TypeError, ValueError) as exc:  # a YAML value TOML cannot hold (binary, a set)
        print(f"error: the imported values cannot be written as TOML ({exc})", file=sys.stderr)
        return EXIT_USAGE
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_CONFIG_BYTES:  # compile would refuse the file: write nothing
        print(f"error: the imported settings would be {size:,} bytes, over the settings file limit of "
              f"{MAX_CONFIG_BYTES:,} bytes that tuner compile reads; nothing was written", file=sys.stderr)
        return EXIT_INVALID
    result = compile_text(text, path=out.resolve())
    try:
        write_atomic(out, text)
    except OSError as exc:
        print(f"{out}: error: cannot write: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_USAGE
    for remark in imported.remarks:
        print(f"note: {remark}")
    print(f"wrote {out}")
    problems = [d for d in result.diagnostics.items if d.severity != "note"]
    if problems:
        print(render_text(problems), file=sys.stderr if not result.diagnostics.ok else sys.stdout)
    if not result.diagnostics.ok:
        print(f"{out} does not compile yet; fix the errors above, then run `tuner compile {out}`",
              file=sys.stderr)
        return EXIT_INVALID
    return EXIT_OK
