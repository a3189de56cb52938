"""What each kind of process the suite starts imports, measured in a fresh interpreter.

The suite starts ~130 rank launches and hundreds of CLI processes; on CI's 2 cores their
import time is most of its time (docs in /work/wt/notes/startup.md of issue 38). tuner's own
modules import the heavy packages inside the functions that use them, so that:

* the `tuner run` / `tuner launch` command line, before it starts any rank, loads no
  torch, accelerate, transformers, datasets, DeepSpeed, peft or diffusers at import (the
  launch itself imports torch's elastic launcher, the data check its tokenizer, when run);
* a DDP or FSDP rank of a causal LM (`python -m tuner.runtime.worker`) loads no DeepSpeed,
  peft, diffusers or datasets through tuner's modules, nor torch.distributed.checkpoint
  (DTensor, sympy: seconds of CPU) before it reads or writes a checkpoint.

Each check imports the entry modules of that process in a subprocess and reads
`sys.modules`, so a module-level import anywhere below them is seen. What the libraries
themselves import at run time (accelerate's `unwrap_model` imports DeepSpeed whenever it is
installed, transformers' schedules import peft) is outside tuner's imports and not checked here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: The modules each process imports first (their module-level imports come along).
ENTRIES = {
    "the tuner run/launch command line before the launch": (
        "tuner.commands.cli", "tuner.commands.run", "tuner.commands.launch", "tuner.runtime.launch",
        "tuner.runtime.run_lock", "tuner.runtime.export", "tuner.runtime.extras", "tuner.runtime.knobs",
        "tuner.runtime.op_cache", "tuner.runtime.data_sources.check", "tuner.runtime.hang_watch",
    ),
    "a DDP/FSDP rank of a causal LM": (
        "tuner.runtime.worker", "tuner.runtime.rank_guard", "tuner.runtime.trainer", "tuner.runtime.callbacks",
        "tuner.runtime.check.observer", "tuner.runtime.families.causal_lm", "tuner.runtime.data_sources.driver",
        "tuner.runtime.data_sources.causal", "tuner.runtime.optim", "tuner.runtime.checkpoint",
        "tuner.runtime.checkpoint_io", "tuner.runtime.export", "tuner.runtime.portable_state",
        "tuner.runtime.resume_agree", "tuner.runtime.cpu_shim",
    ),
    "a rank of `tuner launch` (the bootstrap before the script)": (
        "tuner.runtime.bootstrap", "tuner.runtime.rank_guard", "tuner.runtime.cpu_shim", "tuner.runtime.knobs",
    ),
}
RANK_FORBIDDEN = ("deepspeed", "peft", "diffusers", "datasets", "torch.distributed.checkpoint")
FORBIDDEN = {
    "the tuner run/launch command line before the launch":
        ("torch", "accelerate", "transformers", "deepspeed", "peft", "diffusers", "datasets"),
    "a DDP/FSDP rank of a causal LM": RANK_FORBIDDEN,
    "a rank of `tuner launch` (the bootstrap before the script)": RANK_FORBIDDEN,
}

_PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""


def loaded_by(*modules: str) -> set[str]:
    """Every module a fresh interpreter holds after importing `modules`."""
    out = subprocess.run([sys.executable, "-c", _PROBE, *modules], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"importing {modules} failed:\n{out.stderr[-3000:]}"
    return set(json.loads(out.stdout.splitlines()[-1]))


def heavy(loaded: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f for f in forbidden if f in loaded)


@pytest.mark.parametrize("process", sorted(ENTRIES))
def test_a_process_imports_only_what_its_path_uses(process):
    found = heavy(loaded_by(*ENTRIES[process]), FORBIDDEN[process])
    assert not found, (f"{process} imports {found} at import time: move the import into the function that "
                       f"uses it (each costs seconds of CPU in every such process the suite starts)")


def test_the_check_sees_a_heavy_import(tmp_path):
    """Not vacuous: a module-level import of a forbidden package, below the entry, is seen (a stand-in
    `diffusers` in the probe's folder, found first on its path: no seconds spent importing the real one)."""
    (tmp_path / "diffusers.py").write_text("")
    (tmp_path / "probe_entry.py").write_text("import json\nimport diffusers  # noqa: F401\n")
    out = subprocess.run([sys.executable, "-c", _PROBE, "probe_entry"], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert heavy(set(json.loads(out.stdout.splitlines()[-1])), RANK_FORBIDDEN) == ["diffusers"]
