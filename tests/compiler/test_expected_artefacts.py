"""Every example compiles to exactly the committed artefacts (tests/compiler/expected/).

This is the safety net for refactors of the compiler: accelerate.yaml, deepspeed.json and the
cluster files must stay byte-identical, and so must the manifest apart from `versions` (the
installed packages' versions, which differ between machines). The build directory is the
example's own `build/` (nothing is written: the texts come from the in-memory result).

The compile is given its machine the way a library caller gives it, with no environment
variable: explicit hardware facts (a CPU-only machine, what the examples' "auto" platform
means here). Nothing in the artefacts depends on where the checkout is.

After an intended change of the artefacts, regenerate and review the diff:

    python -m tests.compiler.test_expected_artefacts --write
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tuner.compiler.compile import compile_inputs
from tuner.compiler.gather import gather
from tuner.compiler.read.hardware import HardwareFacts
from tuner.compiler.read.source import read_settings

from tests.conftest import EXAMPLES

EXPECTED = Path(__file__).resolve().parent / "expected"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.toml"))
REGENERATE = "python -m tests.compiler.test_expected_artefacts --write"
#: Manifest keys that describe the machine, not the compile.
HOST_KEYS = ("versions",)
#: The machine the artefacts are compiled for: CPU only, nothing else known.
FACTS = HardwareFacts(platform="cpu", source="stated")


def compiled(path: Path) -> dict[str, str]:
    """Artefact name -> text, as `tuner compile` would write them, the manifest less HOST_KEYS."""
    inputs = gather(read_settings(path), out_dir=path.parent / "build", facts=FACTS)
    result = compile_inputs(inputs)
    assert result.ok, "\n".join(d.format() for d in result.diagnostics.errors)
    files = dict(result.files)
    manifest = json.loads(files.pop("manifest.json"))
    for key in HOST_KEYS:
        manifest.pop(key, None)
    files["manifest.json"] = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    return files


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.stem for p in EXAMPLE_FILES])
def test_example_artefacts_are_the_committed_ones(path):
    expected_dir = EXPECTED / path.stem
    assert expected_dir.is_dir(), f"no expected artefacts for {path.name}: run {REGENERATE}"
    got = compiled(path)
    want = {p.name: p.read_text(encoding="utf-8") for p in sorted(expected_dir.iterdir())}
    assert sorted(got) == sorted(want), f"{path.name}: artefact set changed; if intended, run {REGENERATE}"
    for name, text in got.items():
        assert text == want[name], f"{path.name}: {name} changed; if intended, run {REGENERATE} and review the diff"


def _write() -> None:
    for path in EXAMPLE_FILES:
        target = EXPECTED / path.stem
        target.mkdir(parents=True, exist_ok=True)
        for old in target.iterdir():
            old.unlink()
        for name, text in compiled(path).items():
            (target / name).write_text(text, encoding="utf-8")
        print(f"wrote {target}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {REGENERATE}")
    _write()
