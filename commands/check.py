"""`tuner check BUILD_DIR [SCRIPT | -m MODULE] [ARGS...]`: launch checks, then a short
rehearsal on the real ranks, one report. Exit 0 every check passed, 1 a fault was found,
2 bad input. Without a script it rehearses tuner's own trainer on the build's settings.
See docs/check.md and runtime/check/.
"""

from __future__ import annotations

import sys

from ..compiler.diagnostics import EXIT_USAGE


def parse_skip(values: list[str]) -> frozenset[str] | str:
    from ..runtime.check.findings import CHECKS

    names = {n.strip() for v in values for n in v.split(",") if n.strip()}
    unknown = sorted(names - set(CHECKS))
    if unknown:
        return f"--skip: unknown check {', '.join(unknown)} (checks: {', '.join(CHECKS)})"
    return frozenset(names)


def run_checks(args, target: list[str] | None, command: str = "tuner check") -> int:
    """Run the checks, print the report; returns the exit code (shared with --check)."""
    skip = parse_skip(getattr(args, "skip", None) or [])
    if isinstance(skip, str):
        print(f"{command}: {skip}", file=sys.stderr)
        return EXIT_USAGE
    from ..runtime.artefacts import RunError
    from ..runtime.check.run import check

    as_json = bool(getattr(args, "json", False))
    try:
        report = check(args.build_dir, target, args.machine_rank, args.main_address, args.main_port, skip,
                       launch_only=bool(getattr(args, "launch_only", False)), quiet_stdout=as_json)
    except RunError as exc:
        print(f"{command}: {exc.message}", file=sys.stderr)
        return exc.exit_code
    if as_json:
        print(report.to_json())
    else:
        print(report.text(), file=sys.stderr if command != "tuner check" else sys.stdout)
    return report.exit_code


def _build_dir(args) -> int | None:
    """A settings file is compiled first, into build/ beside it, as `tuner run` does; a
    build directory is used as it is. Returns an exit code when the compile failed."""
    if not args.build_dir.is_file():
        return None
    from .compile_first import compile_settings

    built = compile_settings(args.build_dir, [])
    if isinstance(built, int):
        return built
    args.build_dir = built
    return None


def run(args) -> int:
    code = _build_dir(args)
    if code is not None:
        return code
    target: list[str] | None = None
    if args.target:
        from .target import split_target

        got = split_target(args)
        if isinstance(got, str):
            print(f"tuner check: {got}", file=sys.stderr)
            return EXIT_USAGE
        target = got
    return run_checks(args, target)
