"""Issue 27: generated inputs that put files of the person's into every directory tuner
writes (the build, the run's output, final/, checkpoints/, a checkpoint, an export) under
names made from tuner's own (its temporaries, backups, staging and lock names, decorated),
then check their bytes after every command: `tuner compile`, `tuner run --resume`, `tuner
checkpoint export`. Seeded: a failure names its seed and the file."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.reliability.rel_helpers import EXAMPLES, tuner
from tests.reliability.test_persons_files import copy_run, run
from tuner.compiler.diagnostics import EXIT_OK

#: Names tuner writes or reads in its output directories, and ways a person's file may
#: resemble one of them without being it.
TUNERS = ("accelerate.yaml", "deepspeed.json", "manifest.json", "launch.sh", "tuner_export.json", "model.safetensors",
          "config.json", "latest", "step-2", "final", "metrics.jsonl", ".tuner-run.lock", ".tuner-compile.lock",
          ".tuner-export.lock", ".tmp-step-2", "tuner_checkpoint.json", "optimizer.bin")
DECORATIONS = (lambda n: f".{n}.mine.tmp", lambda n: f".{n}.{os.getpid()}.bak.tmp", lambda n: f"{n}.bak",
               lambda n: f"{n}~", lambda n: f"{n}.tmp", lambda n: f".tuner-export-{n}", lambda n: f"{n}-notes",
               lambda n: f"Copy of {n}", lambda n: f".{n}.swp")


def plant(root: Path, rng: random.Random, count: int) -> dict[Path, bytes]:
    """`count` files of the person's in `root` (some inside a folder of theirs)."""
    planted = {}
    while len(planted) < count:
        name = rng.choice(DECORATIONS)(rng.choice(TUNERS))
        path = root / name / "inside.txt" if rng.random() < 0.3 else root / name
        if path.exists() or path.parent.is_file() or any(path == p or path in p.parents for p in planted):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        data = rng.randbytes(rng.randrange(0, 64))
        path.write_bytes(data)
        planted[path] = data
    return planted


def intact(planted: dict[Path, bytes], after: str, seed: int) -> None:
    for path, data in planted.items():
        assert path.is_file() and path.read_bytes() == data, f"seed {seed}: {path} changed by {after}"


@pytest.mark.parametrize("seed", range(4))
def test_compile_keeps_every_file_of_the_persons(tmp_path, seed):
    rng = random.Random(seed)
    out = tmp_path / "build"
    planted = plant(out, rng, 12)
    for example in rng.sample(["zero1.toml", "ddp.toml", "multi_node.toml", "zero3.toml", "fsdp2.toml"], 3):
        if not (EXAMPLES / example).is_file():
            continue
        code, _, err = tuner("compile", EXAMPLES / example, "--out", out)
        assert code == EXIT_OK, err
        intact(planted, f"compiling {example}", seed)


@pytest.mark.slow
def test_run_and_export_keep_every_file_of_the_persons(finished_run, tmp_path):
    seed = 7
    rng = random.Random(seed)
    run_dir = copy_run(finished_run, tmp_path / "run")
    out = run_dir / "out"
    planted: dict[Path, bytes] = {}
    for where in (run_dir / "build", out, out / "final", out / "checkpoints", out / "checkpoints" / "step-2"):
        planted.update(plant(where, rng, 3))
    p = run("run", run_dir / "settings.toml", "--resume", "latest", "--max-steps", "6", cwd=run_dir)
    assert p.returncode == EXIT_OK, p.stderr[-3000:]
    intact(planted, "tuner run --resume latest", seed)
    from tuner.runtime.export import export_checkpoint

    export = tmp_path / "export"
    export_checkpoint(out / "checkpoints" / "step-6", export)
    planted.update(plant(export, rng, 4))
    export_checkpoint(out / "checkpoints" / "step-4", export)  # an earlier export: updated
    intact(planted, "tuner checkpoint export", seed)
