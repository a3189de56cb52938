"""`python -m tuner` and the `tuner` console script (pyproject.toml names `entry`).

A Ctrl-C while Python is still importing tuner (the first tenth of a second, more on a busy
machine) would print a KeyboardInterrupt traceback: the first thing this module does is to
make SIGINT end the process quietly with 130, as `tuner.commands.cli.main` does once it runs.
"""

import os
import signal


def _interrupted_early(signum, frame):
    os.write(2, b"interrupted\n")
    os._exit(130)  # EXIT_INTERRUPTED; nothing has been written yet


signal.signal(signal.SIGINT, _interrupted_early)


def entry() -> int:
    try:
        from tuner.commands.cli import main

        signal.signal(signal.SIGINT, signal.default_int_handler)  # main() reports it from here on
        return main()
    except KeyboardInterrupt:  # between the restore and main's own handler
        os.write(2, b"interrupted\n")
        return 130


if __name__ == "__main__":
    raise SystemExit(entry())
