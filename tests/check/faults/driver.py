"""Runs several fault scripts one after the other in the same ranks (one launch for many
faults: each rank imports torch once). Each script builds its own Accelerator, so the
report of `tuner check` has one group per script, in order. accelerate's shared state is
reset between scripts, as a fresh process would have it.

    python driver.py OUT_JSON SCRIPT...     (under tuner launch / tuner check)

Rank 0 writes OUT_JSON: each script's exit status.
"""
import json
import os
import runpy
import sys

here = os.path.dirname(os.path.abspath(__file__))
out, scripts = sys.argv[1], sys.argv[2:]
status = {}
for name in scripts:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    sys.argv = [name]
    try:
        runpy.run_path(os.path.join(here, name), run_name="__main__")
        status[name] = 0
    except SystemExit as exc:
        status[name] = exc.code or 0
if os.environ.get("RANK", "0") == "0":
    with open(out, "w") as fh:
        json.dump(status, fh)
