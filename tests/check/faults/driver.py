"""Runs several scripts one after the other in the same ranks (one launch for many faults:
each rank imports torch once). Each script builds its own Accelerator(s), so the report of
`tuner check` has one group per Accelerator, in order. accelerate's shared state is reset
between scripts, as a fresh process would have it.

    python driver.py OUT_JSON SCRIPT[::ARG::ARG...]...     (under tuner launch / tuner check)

A SCRIPT is a file name in this folder or an absolute path; ``::`` separates its arguments.
Rank 0 writes OUT_JSON: each script's exit status ("stopped" when the rehearsal ended it).
"""
import json
import os
import runpy
import sys

here = os.path.dirname(os.path.abspath(__file__))
out, scripts = sys.argv[1], sys.argv[2:]
status = {}


def save():
    if os.environ.get("RANK", "0") == "0":  # every rank, if a script cleared RANK: each writes whole files
        tmp = f"{out}.{os.getpid()}"
        with open(tmp, "w") as fh:
            json.dump(status, fh)
        os.replace(tmp, out)


for item in scripts:
    from accelerate.state import AcceleratorState, GradientState

    name, *args = item.split("::")
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    sys.argv = [name, *args]
    try:
        runpy.run_path(os.path.join(here, name), run_name="__main__")
        status[name] = 0
    except SystemExit as exc:
        status[name] = exc.code or 0
    except BaseException as exc:  # tuner check's end of the rehearsal: say so, then let it end the ranks
        if type(exc).__name__ == "RehearsalDone":
            status[name] = "stopped"
            save()
        raise
save()
