"""The `tuner` command line. Each subcommand imports only what it needs, when it runs.

`tuner compile` must never import torch, accelerate, deepspeed or textual, so nothing
here does at module level; heavy subcommands import their modules inside their handler.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from importlib import metadata
from pathlib import Path

from ..compiler.diagnostics import EXIT_BROKEN_PIPE, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from ..compiler.read.files import describe_os_error
from .checkpoint_args import add_checkpoint_parser


def _version() -> str:
    """The installed distribution's version (pyproject.toml's), read only when it is shown:
    reading package metadata costs a compile a few hundredths of a second."""
    try:
        return metadata.version("tuner-train")
    except metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
        return "(not installed)"


class _VersionAction(argparse.Action):
    """``--version``: argparse's own action, with the version read when the flag is given."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0,
                         help=help or "show program's version number and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"tuner {_version()}")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on usage errors already; keep its message, drop the traceback risk."""


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (``--max-steps 0`` would export an untrained model)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more (got {value})")
    return value


def _nonempty_path(text: str) -> Path:
    """argparse type: a path that is not empty (``--out ""`` is an unset shell variable,
    not a wish to write into the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; name a path")
    return Path(text)


SETTING_DEST = "setting:"
#: Boolean spellings a settings flag may take as its value (anything else after a boolean
#: flag is the next argument, and the flag alone means true).
#: Commands whose module in commands/ is not named as the command (a Python keyword).
_COMMAND_MODULE = {"import": "import_"}
_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0"}


def _add_overrides(p: argparse.ArgumentParser) -> None:
    """`--set KEY=VALUE`, and every settings key and seed alias as a flag of its own
    (``--fsdp_version 2``, ``--fsdp_version=2``, ``--fsdp_enable``, ``--fsdp_enable false``),
    registered from the schema so that ``--help`` lists them. Call it after the command's
    own options: a name the command already uses (``--resume``) stays the command's."""
    from ..compiler.keys.schema import index

    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting (canonical key like fsdp.version or a flat alias like fsdp_version)")
    idx = index()
    group = p.add_argument_group("settings as flags", "every settings key or alias: --KEY VALUE, --KEY=VALUE, "
                                 "or --KEY alone for true (as the seeds write them); the same as --set KEY=VALUE")
    own = set(p._option_string_actions)  # noqa: SLF001 - argparse has no public list of a parser's flags
    for name in sorted(set(idx.aliases) | set(idx.keys)):
        if f"--{name}" in own:
            continue
        canonical = idx.aliases.get(name, name)
        group.add_argument(f"--{name}", dest=SETTING_DEST + name, nargs="?", const="true", default=None,
                           metavar="VALUE", help=canonical if canonical != name else argparse.SUPPRESS)


def _settings_flags(argv: list[str]) -> list[str]:
    """Settings flags as argparse cannot read them alone.

    A boolean settings flag followed by something that is not a boolean word (the settings
    file, another flag) means true: say so, so argparse does not take that argument as the
    flag's value. A flag that is no settings key but a former one (``--load_in_4bit``) or a
    misspelt one (``--fsdp_verison 2``) becomes ``--set NAME=VALUE``, so that the compiler's
    diagnostic names the key to write instead of argparse's bare "unrecognized arguments"."""
    from ..compiler.keys.schema import index

    idx = index()
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        flag, eq, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        following = argv[i + 1] if i + 1 < len(argv) else None
        info = idx.keys.get(idx.aliases.get(flag, flag)) if flag else None
        if info is None and ("_" in flag or "." in flag) and (flag in idx.replaced or idx.suggest(flag)):
            if not eq:
                # its value is the next word, unless that is the settings file or build folder
                skip = following is not None and not following.startswith("-") and (
                    following.lower() in _BOOL_WORDS
                    or not (following.endswith(".toml") or os.path.exists(following)))
                value = following if skip and following is not None else "true"
            out += ["--set", f"{flag}={value}"]
            continue
        out.append(arg)
        if info is not None and not eq and info.prop.get("type") == "boolean":
            if following is None or following.lower() not in _BOOL_WORDS:
                out[-1] = f"{arg}=true"
    return out


def _collect_setting_flags(args: argparse.Namespace) -> None:
    """Settings flags join the --set overrides."""
    for dest, value in sorted(vars(args).items()):
        if dest.startswith(SETTING_DEST) and value is not None:
            args.overrides.append(f"{dest[len(SETTING_DEST):]}={value}")


def _add_machine_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--machine-rank", type=int, default=None, metavar="N",
                   help="this machine's rank in a multi-machine build (default: $SLURM_NODEID, "
                        "$PET_NODE_RANK or the compiled hardware.machine_rank)")
    p.add_argument("--main-address", default=None, metavar="HOST",
                   help="machine 0's address (default: the compiled hardware.main_process_ip)")
    p.add_argument("--main-port", type=int, default=None, metavar="PORT",
                   help="rendezvous port on machine 0 (default: the compiled hardware.main_process_port)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tuner", description="Configure, compile and run multi-GPU training.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("compile", help="validate settings.toml and write accelerate.yaml, deepspeed.json, manifest.json",
                       usage="tuner compile SETTINGS [--out DIR] [--format text|json] [--quiet] [--verify] "
                             "[--set KEY=VALUE]... [--KEY [VALUE]]...")
    p.add_argument("settings", type=Path, help="the settings file")
    p.add_argument("--out", type=_nonempty_path, default=None, help="output directory (default: build/ beside the settings)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="diagnostics format")
    p.add_argument("--quiet", "-q", action="store_true", help="print errors and warnings only")
    p.add_argument("--verify", action="store_true",
                   help="after writing, have accelerate's loader and launcher and DeepSpeed's DeepSpeedConfig "
                        "check the build (in a subprocess; needs accelerate, torch and deepspeed installed)")
    _add_overrides(p)

    p = sub.add_parser("import", help="turn an accelerate YAML, DeepSpeed JSON or flat config into settings.toml")
    p.add_argument("sources", type=Path, nargs="+", help="accelerate YAML, DeepSpeed JSON, or a SimpleTuner-style JSON/TOML")
    p.add_argument("--out", "-o", type=_nonempty_path, default=Path("settings.toml"), help="settings file to write")
    p.add_argument("--force", action="store_true", help="overwrite an existing settings file")

    p = sub.add_parser("schema", help="print the settings JSON Schema, or one key's or section's documentation")
    p.add_argument("key", nargs="?", help="a canonical key, an alias, or a section (e.g. fsdp)")
    p.add_argument("--write", action="store_true",
                   help="regenerate schemas/settings.schema.json and settings.input.schema.json from the declaration")

    from ..tui.keys import keys_text  # plain Python: no Textual import
    p = sub.add_parser("wizard", help="open the terminal wizard (the default with no command)",
                       epilog=keys_text(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("settings", type=Path, nargs="?", default=None)

    p = sub.add_parser("run", help="train from a build directory or settings file on real ranks",
                       usage="tuner run TARGET [--resume latest|PATH [--new-global-batch]] [--max-steps N] "
                             "[--callback MODULE:NAME]... [--check] [--machine-rank N] [--main-address HOST] "
                             "[--main-port PORT] [--set KEY=VALUE]... "
                             "[--KEY [VALUE]]...")
    p.add_argument("target", type=Path, help="a build directory (with manifest.json) or a settings file")
    p.add_argument("--resume", default=None, help="'latest' or a checkpoint directory")
    p.add_argument("--new-global-batch", action="store_true",
                   help="resume at a world size that changes the global batch (micro x accumulation x ranks) on purpose")
    p.add_argument("--max-steps", type=_positive_int, default=None, help="stop after this many optimizer steps (1 or more)")
    p.add_argument("--max_steps", dest="max_steps", type=_positive_int, help=argparse.SUPPRESS)  # the seeds' spelling
    p.add_argument("--callback", action="append", default=[], metavar="MODULE:NAME",
                   help="run your trainer callback on every rank (repeatable; docs/runtime.md, Callbacks)")
    p.add_argument("--check", action="store_true",
                   help="run `tuner check` first (launch checks and a short rehearsal); stop if it finds a fault")
    _add_machine_flags(p)
    _add_overrides(p)

    p = sub.add_parser("launch", help="run your own training script on the compiled build's ranks",
                       usage="tuner launch [--check] [--machine-rank N] BUILD_DIR (SCRIPT | -m MODULE) [ARGS...]")
    p.add_argument("build_dir", type=Path, help="a build directory (with manifest.json)")
    p.add_argument("target", nargs=argparse.REMAINDER, help="SCRIPT [ARGS...] or -m MODULE [ARGS...]")
    _add_machine_flags(p)

    p.add_argument("--check", action="store_true",
                   help="run `tuner check` first (launch checks and a short rehearsal); stop if it finds a fault")

    p = sub.add_parser("check", help="find silent faults before training: launch checks and a short rehearsal",
                       usage="tuner check [--json] [--skip NAME[,NAME]] [--launch-only] [--machine-rank N] "
                             "(BUILD_DIR | SETTINGS.toml) [SCRIPT | -m MODULE] [ARGS...]")
    p.add_argument("build_dir", type=Path,
                   help="a build directory (with manifest.json), or a settings file (compiled first, as tuner run does)")
    p.add_argument("target", nargs=argparse.REMAINDER,
                   help="SCRIPT [ARGS...] or -m MODULE [ARGS...] (none: tuner's own trainer)")
    p.add_argument("--json", action="store_true", help="the report as JSON on stdout (the ranks' output goes to stderr)")
    p.add_argument("--skip", action="append", default=[], metavar="NAME",
                   help="turn a check off (repeatable or comma-separated; names in docs/check.md)")
    p.add_argument("--launch-only", action="store_true", help="the launch checks only, no rehearsal")
    _add_machine_flags(p)

    add_checkpoint_parser(sub, _nonempty_path)

    p = sub.add_parser("blocks", help="list a model's module classes and suggest FSDP wrap classes (meta device)")
    p.add_argument("model", help="a local model directory or builtin[:NAME]")
    p.add_argument("--family", default=None)
    p.add_argument("--flavour", default="")
    p.add_argument("--refresh", action="store_true", help="ignore the cache")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("estimate", help="per-GPU and per-host memory estimate for each strategy",
                       usage="tuner estimate SETTINGS [--json] [--set KEY=VALUE]... [--KEY [VALUE]]...")
    p.add_argument("settings", type=Path)
    p.add_argument("--json", action="store_true")
    _add_overrides(p)

    p = sub.add_parser("data", help="show the first training rows as the trainer sees them (tokens, loss mask, stats)",
                       usage="tuner data SETTINGS [--rows N] [--json] [--set KEY=VALUE]...")
    p.add_argument("settings", type=Path)
    p.add_argument("--rows", type=_positive_int, default=3, help="how many rows to show (default 3)")
    p.add_argument("--json", action="store_true", help="input_ids, labels and position_ids of each row, and the statistics")
    _add_overrides(p)

    p = sub.add_parser("doctor", help="report GPUs, platform, memory, disk and DeepSpeed op availability")
    p.add_argument("--json", action="store_true")
    p.add_argument("settings", type=Path, nargs="?", default=None, help="check free disk at this run's paths")

    p = sub.add_parser("cache", help="maintenance of tuner's caches")
    csub = p.add_subparsers(dest="cache_command", metavar="ACTION")
    c = csub.add_parser("clear", help="clear the block-detection cache and/or DeepSpeed offload swap directories")
    c.add_argument("which", nargs="?", choices=("detection", "offload", "all"), default="all")
    c.add_argument("settings", type=Path, nargs="?", default=None, help="settings whose offload path to clean")

    p = sub.add_parser("completion", help="print a shell completion script: eval \"$(tuner completion bash)\"")
    p.add_argument("shell", choices=("bash", "zsh"))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; every way out is an exit code from the README's table.

    Errors a person can fix are handled by each command. What escapes them is sorted here:
    Ctrl-C, a closed pipe (``| head``), an OSError (an I/O problem, reported in one line
    naming the file: "No space left on device", "Read-only file system"), and anything else,
    which is a bug: one line says so and the traceback goes to a file, not the terminal.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and not argv[0].startswith("-") else "wizard"
    if sys.stderr is None:  # started with 2>&-: messages go nowhere, but the command still ends well
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    if sys.stdout is None:  # started with >&-: nothing can be written where the caller looks
        print(f"tuner {command}: error: standard output is closed; redirect it (>/dev/null to discard it)",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        print(f"tuner {command}: error: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except ModuleNotFoundError as exc:
        from ..runtime.extras import install_hint  # plain Python: which extra installs what

        extra = install_hint((exc.name or "").split(".")[0])
        if extra is None:  # a module of tuner's own, or an undeclared dependency: a bug
            return _internal_error(command, exc)
        print(f"tuner {command}: needs {exc.name}, which is not installed: {extra}", file=sys.stderr)
        return EXIT_USAGE
    except RecursionError:
        # Inputs are depth-checked where they are read; one that slipped through is a bug too,
        # but say what probably caused it.
        path = save_traceback(command)
        print(f"tuner {command}: internal error (a bug in tuner): input nested too deeply; "
              f"traceback saved to {path}", file=sys.stderr)
        return EXIT_INTERNAL
    except RuntimeError as exc:
        if not str(exc).startswith("Symlink loop from"):  # Python 3.11's pathlib for ELOOP
            return _internal_error(command, exc)
        print(f"tuner {command}: error: {exc} (a symbolic link that points back at itself); "
              f"remove or fix the link", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - the last line of defence, by design
        return _internal_error(command, exc)


def _internal_error(command: str, exc: BaseException) -> int:
    path = save_traceback(command)
    print(f"tuner {command}: internal error (a bug in tuner, please report it): "
          f"{type(exc).__name__}: {_one_line(str(exc))}; traceback saved to {path}", file=sys.stderr)
    return EXIT_INTERNAL


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def save_traceback(command: str) -> str:
    """Write the current exception's traceback to a file (the cache directory, else the
    temporary directory) and return its path; never raises."""
    text = f"tuner {_version()} {command}: {' '.join(sys.argv)}\n\n{traceback.format_exc()}"
    name = f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    candidates = []
    try:
        from ..compiler.read.block_cache import cache_dir

        candidates.append(cache_dir() / "crashes")
    except Exception:  # noqa: BLE001 - a broken cache setting must not hide the crash
        pass
    import tempfile

    candidates.append(Path(tempfile.gettempdir()))
    for folder in candidates:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / name
            path.write_text(text, encoding="utf-8")
            return str(path)
        except OSError:
            continue
    return "(nowhere: no writable directory)"


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush
    does not print "Exception ignored ... BrokenPipeError"."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (tests capture stdout)
        pass


def _warning_line(message, category, filename, lineno, line=None) -> str:
    """Warnings (a corrupt cache, ignored) as one plain line, not Python's source excerpt."""
    return f"warning: {message}\n"


def _main(argv: list[str]) -> int:
    import warnings

    warnings.formatwarning = _warning_line
    if argv and argv[0] in ("compile", "run", "estimate", "data"):
        argv = _settings_flags(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if hasattr(args, "overrides"):
        _collect_setting_flags(args)
    command = args.command or "wizard"
    # One module per command (imported only when run: `tuner compile` must stay light); a
    # command's missing optional package (textual, torch...) is reported by `main`.
    module = importlib.import_module(f"tuner.commands.{_COMMAND_MODULE.get(command, command)}")
    return int(module.run(args) or EXIT_OK)
