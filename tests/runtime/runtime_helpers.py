"""Helpers for runtime tests: write a settings file, run `tuner run` as a user would, read results.

Runs use a tiny Llama (hidden 32, 2 layers), 32-token rows and a 64-row training set cut
from the bundled corpus, so one epoch is 8 optimizer steps at micro batch 4 on 2 ranks.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests import harness
from tests.run_result import Run
from tests.runtime.trace_callbacks import TRACE

ROWS = 64  # about: 36 documents pack into ~64 rows
SEQ = 32

BASE = {
    "model": {"family": "causal_lm", "path": "builtin:micro-llama"},
    "hardware": {"platform": "cpu", "num_processes": 2},
    "data": {"path": "train.jsonl", "validation_path": "val.jsonl", "seq_len": SEQ},
    "training": {"micro_batch_size": 4, "learning_rate": 1e-2, "max_steps": 10, "warmup_steps": 2,
                 "validation_every": 5, "max_grad_norm": 1.0},
    "checkpoint": {"every_steps": 5, "keep_last": 3},
    "output": {"dir": "out"},
}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)


def to_toml(settings: dict) -> str:
    lines = []
    for section, values in settings.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def merged(**sections) -> dict:
    out = {k: dict(v) for k, v in BASE.items()}
    for name, values in sections.items():
        out.setdefault(name, {}).update(values)
    return out


def write_data(d: Path) -> None:
    """Training docs that pack into exactly ROWS rows of SEQ tokens, and a few validation docs."""
    from tuner.runtime.families.causal_lm import bundled_dir

    docs = [json.loads(line)["text"] for line in (bundled_dir() / "corpus.jsonl").read_text().splitlines()]
    # ~40 tokens per sentence-group: take enough docs for ROWS rows, then trim in the family.
    (d / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs[:36]))
    (d / "val.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs[-12:]))


REPO = Path(__file__).resolve().parents[2]
#: the one environment of the tests' tuner processes (tests/harness.py)
tuner_env = harness.env


def tuner_run(d: Path, settings: dict, *args: str, timeout: float = 400, trace: bool = True,
              env: dict | None = None, edit_build=None) -> Run:
    """Write settings.toml (and data) into `d`, then `python -m tuner run` it.

    `edit_build(build_dir)`, when given, compiles first and edits the artefacts, then runs
    the build directory (how a user hand-tunes deepspeed.json).
    """
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "train.jsonl").exists():
        write_data(d)
    (d / "settings.toml").write_text(to_toml(settings))
    target = d / "settings.toml"
    if edit_build is not None:
        c = harness.tuner("compile", str(target), "-q")
        assert c.returncode == 0, c.stderr
        edit_build(d / "build")
        target = d / "build"
    # The trace: each rank's rank{N}.json, written by a trainer callback (trace_callbacks.py).
    extra = {"TUNER_TEST_TRACE_DIR": str(d / "trace")} if trace else {}
    extra.update(env or {})
    hooks = ["--callback", TRACE] if trace else []
    t0 = time.monotonic()
    proc = harness.tuner("run", str(target), *args, *hooks, cwd=d, timeout=timeout, env=extra)
    run = Run(d, proc, time.monotonic() - t0)
    for r in (0, 1):
        p = d / "trace" / f"rank{r}.json"
        if p.is_file():
            run.traces[r] = json.loads(p.read_text())
    return run


def assert_ok(run: Run) -> None:
    run.check()


