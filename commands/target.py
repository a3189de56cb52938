"""The training target of `tuner launch` and `tuner check`: launcher flags (``--machine-rank``
...), then ``SCRIPT [ARGS...]`` or ``-m MODULE [ARGS...]``."""

from __future__ import annotations

import sys

_FLAGS = {"--machine-rank": ("machine_rank", int), "--main-address": ("main_address", str),
          "--main-port": ("main_port", int)}


def split_target(args) -> list[str] | str:
    """Pull launcher flags written between BUILD_DIR and the script out of the remainder;
    return ``[SCRIPT, ARGS...]`` / ``["-m", MODULE, ARGS...]`` or an error message."""
    rest = list(args.target or [])
    while rest and rest[0].split("=", 1)[0] in _FLAGS:
        flag, _, value = rest.pop(0).partition("=")
        if not value:
            if not rest:
                return f"{flag} needs a value"
            value = rest.pop(0)
        name, kind = _FLAGS[flag]
        try:
            setattr(args, name, kind(value))
        except ValueError:
            return f"{flag}: {value!r} is not a valid value"
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if not rest:
        return "name the training script (SCRIPT [ARGS...]) or module (-m MODULE [ARGS...])"
    if rest[0] in ("-m", "--module"):
        if len(rest) < 2:
            return "-m needs a module name"
        return ["-m", *rest[1:]]
    if rest[0].startswith("-"):
        return f"unknown launcher option {rest[0]!r} (the script's own options go after the script)"
    return rest


def module_problem(name: str) -> str | None:
    """Why ``-m NAME`` cannot run (as ``python -m`` finds it from the working directory), or
    None when it can or cannot be told; found by the import system's finders without importing
    it (a package's ``__init__`` is not run here)."""
    import os

    parts = name.split(".")
    if not all(part.isidentifier() for part in parts):
        return f"-m {name!r}: not a module name"
    saved = sys.path[:]
    sys.path[:1] = [os.getcwd()]  # the ranks run `python -m` here: the working directory comes first
    try:
        path = None
        for i in range(len(parts)):
            full = ".".join(parts[: i + 1])
            try:
                spec = next((found for finder in sys.meta_path if hasattr(finder, "find_spec")
                             for found in [finder.find_spec(full, path)] if found is not None), None)
            except Exception:  # noqa: BLE001 - a finder that needs the parent imported: cannot tell
                return None
            if spec is None:
                where = "the working directory and the installed packages" if i == 0 else ".".join(parts[:i])
                return f"no module named {full!r} (looked in {where}); -m takes a module's import name"
            path = spec.submodule_search_locations
            if path is None and i < len(parts) - 1:
                return None  # a module's attribute (os.path): let Python decide
    finally:
        sys.path[:] = saved
    return None
