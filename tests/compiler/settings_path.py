"""The path the settings take through a compile: which of tuner's modules they enter, and how
often the compile comes back to a module it had already left. Recorded with `sys.setprofile`
over the real calls of `compile_text`, from its entry.

A call follows the settings when one of its arguments (other than the `self` of a method) holds
them in one of their forms: the settings text, the parsed `Source` or its data, the
`Normalised` settings or their mapping, the `CompileInputs`, the typed `Settings`, the rules'
`Checked`. Code of the module that defines the value it gets (a method, `CompileInputs.model`,
`Settings.to_dict`; a function beside the class that takes it) is the value's
own code, not a stage the settings are handed to; a call that gets none of them (a
diagnostic, a key-path constant, a parser of numbers) is not followed.

* entered: the modules such a call runs in;
* returns: such a call into a module that had run such a call before and has none on the
  stack now (it had been left): the compile went back to a stage it had finished with.

`python -m tests.compiler.settings_path [SETTINGS.toml ...]` prints the figures (default:
every example).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
#: The value types that carry the settings, by class name (anywhere in the value's MRO).
CARRIERS = frozenset({"Source", "Normalised", "CompileInputs", "Settings", "Checked"})


@dataclass
class SettingsPath:
    entered: list[str] = field(default_factory=list)
    """Modules, as repository paths, in the order the settings first entered them."""
    returns: list[tuple[str, str]] = field(default_factory=list)
    """(module, function) of each call back into a module already left."""


def _package_roots() -> tuple[Path, ...]:
    import tuner

    root = Path(tuner.__file__).resolve().parents[1]
    return tuple(root / name for name in ("compiler", "commands", "runtime", "tui", "schemas", "tuner"))


def follow(run: Callable[[], Any], text: str) -> tuple[Any, SettingsPath]:
    """Run `run` (a compile of `text`) and record the path of the settings through it."""
    roots = _package_roots()
    base = roots[0].parent
    files: dict[str, str | None] = {}
    data_ids: set[int] = set()

    def module(filename: str) -> str | None:
        if filename not in files:
            path = Path(filename).resolve()
            files[filename] = path.relative_to(base).as_posix() if any(r in path.parents for r in roots) else None
        return files[filename]

    def carries(value: Any) -> bool:
        if isinstance(value, str):
            return value == text
        if id(value) in data_ids:
            return True
        if any(c.__name__ in CARRIERS for c in type(value).__mro__):
            for name in ("data", "settings"):  # the parsed data, the normalised mapping
                inner = getattr(value, name, None)
                if isinstance(inner, dict) or type(inner).__name__ == "mappingproxy":
                    data_ids.add(id(inner))
            return True
        return False

    def own(value: Any, filename: str) -> bool:
        """Whether `value`'s class is defined in the module `filename` (the value's own code)."""
        defined = getattr(sys.modules.get(type(value).__module__), "__file__", None)
        return defined is not None and module(defined) == module(filename)

    out = SettingsPath()
    stack: list[str | None] = []
    on_stack: dict[str, int] = {}
    left: set[str] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            mod = module(code.co_filename)
            if mod is not None:
                names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
                carried = [a for a in (frame.f_locals.get(n) for n in names) if carries(a)]
                if not carried or all(own(a, code.co_filename) for a in carried):
                    mod = None
            if mod is not None and not on_stack.get(mod):
                if mod in left:
                    out.returns.append((mod, code.co_qualname))
                if mod not in out.entered:
                    out.entered.append(mod)
            stack.append(mod)
            if mod is not None:
                on_stack[mod] = on_stack.get(mod, 0) + 1
        elif event == "return" and stack:
            mod = stack.pop()
            if mod is not None:
                on_stack[mod] -= 1
                if not on_stack[mod]:
                    left.add(mod)

    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        result = run()
    finally:
        sys.setprofile(old)
    return result, out


def compile_path(settings: Path) -> tuple[Any, SettingsPath]:
    """`compile_text` of a settings file, followed (after one compile that loads what it needs)."""
    from tuner.compiler.compile import compile_text

    text = settings.read_text(encoding="utf-8")
    compile_text(text, path=settings)
    return follow(lambda: compile_text(text, path=settings), text)


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted((REPO / "examples").glob("*.toml"))
    worst = (0, 0)
    for path in paths:
        result, p = compile_path(path)
        worst = (max(worst[0], len(p.entered)), max(worst[1], len(p.returns)))
        print(f"{path.name}: {len(p.entered)} modules entered, {len(p.returns)} returns to a module already left"
              f"{'' if result.ok else ' (errors)'}")
        if len(paths) == 1:
            print("  entered:", ", ".join(p.entered))
            print("  returns:", ", ".join(f"{m} ({f})" for m, f in p.returns))
    print(f"most: {worst[0]} entered, {worst[1]} returns")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
