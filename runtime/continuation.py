"""The continuation check: does a resumed run continue the training its checkpoint came from?

`tuner checkpoint verify REFERENCE RESUMED` compares two runs' output directories: an
uninterrupted reference (often the very run that wrote the checkpoint and went on) and a run
resumed from one of its checkpoints, at another world size or under another strategy.

* the loss at every step both logged must agree within `LOSS_RTOL` (relative);
* the parameters in the newest checkpoint step both saved must agree, tensor by tensor,
  within `PARAM_RTOL` of the tensor's largest magnitude (read as full tensors, whatever
  strategy wrote them, with the reader `tuner checkpoint export` uses).

A resume that loses the optimizer state (Adam's moments restart), the LR schedule or the
data position (samples trained twice or skipped) moves the losses by far more than that at
the first step after it; the tolerances leave room only for the order of floating-point
reductions, which changes with the world size and the strategy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import checkpoint as ckpt
from .artefacts import RunError

#: Losses of the resumed run vs the reference at the same step (relative).
LOSS_RTOL = 1e-4
#: Each parameter tensor: max |resumed - reference| over max |reference| (relative).
PARAM_RTOL = 1e-4


@dataclass
class Verdict:
    ok: bool = True
    losses: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def fail(self, text: str) -> None:
        self.ok = False
        self.problems.append(text)

    def to_json(self) -> str:
        return json.dumps({"ok": self.ok, "losses": self.losses, "params": self.params,
                           "problems": self.problems}, indent=2) + "\n"


def read_losses(out_dir: Path) -> dict[int, float]:
    """step -> logged loss of a run's ``metrics.jsonl`` (the last value of a step logged twice)."""
    from ..compiler.read.files import FileError, read_text

    path = Path(out_dir) / "metrics.jsonl"
    try:
        text = read_text(path, "metrics file", 1 << 28)
    except FileError as exc:
        raise RunError(f"{out_dir} is not a run's output directory: {exc.message}") from None
    losses: dict[int, float] = {}
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
        if isinstance(row, dict) and isinstance(row.get("step"), int) and isinstance(row.get("loss"), (int, float)):
            losses[row["step"]] = float(row["loss"])
    return losses


def _checkpoint_steps(out_dir: Path) -> dict[int, Path]:
    return dict(ckpt.complete_checkpoints(ckpt.checkpoints_dir(out_dir)))


def verify(reference: Path, resumed: Path, loss_rtol: float = LOSS_RTOL, param_rtol: float = PARAM_RTOL) -> Verdict:
    reference, resumed = Path(reference), Path(resumed)
    if reference.resolve() == resumed.resolve():
        raise RunError(f"{reference} is both the reference and the resumed run; resume into another output.dir "
                       f"to compare them")
    want, got = read_losses(reference), read_losses(resumed)
    common = sorted(set(want) & set(got))
    if not common:
        raise RunError(f"{resumed} and {reference} logged no loss at the same step (resumed: steps "
                       f"{_span(got)}; reference: {_span(want)}); run the reference past the resume step")
    v = Verdict()
    for step in common:
        rel = abs(got[step] - want[step]) / max(abs(want[step]), 1e-12)
        v.losses.append({"step": step, "reference": want[step], "resumed": got[step], "rel": rel})
        if rel > loss_rtol:
            v.fail(f"step {step}: loss {got[step]:.6f}, the reference's {want[step]:.6f} "
                   f"(relative difference {rel:.2e} > {loss_rtol:g})")
    first = min(got)
    shared = sorted(set(_checkpoint_steps(reference)) & {s for s in _checkpoint_steps(resumed) if s >= first})
    if not shared:
        v.fail(f"no checkpoint step saved by both runs after the resume (step {first - 1}); the parameters "
               f"were not compared: save checkpoints at the same steps (checkpoint.every_steps)")
        return v
    step = shared[-1]
    v.params = _compare_params(_checkpoint_steps(reference)[step], _checkpoint_steps(resumed)[step], param_rtol)
    v.params["step"] = step
    for name, rel in v.params.pop("bad"):
        v.fail(f"step {step}: parameter {name} differs by {rel:.2e} of its largest value (> {param_rtol:g})")
    return v


def _span(steps: dict[int, float]) -> str:
    return f"{min(steps)}-{max(steps)}" if steps else "none"


def _compare_params(reference: Path, resumed: Path, rtol: float) -> dict[str, Any]:
    import contextlib
    import io

    from .export import full_state_dict

    states = []
    for path in (reference, resumed):
        meta = ckpt.read_meta(path, action="export")
        try:  # DeepSpeed's zero_to_fp32 prints its progress: keep stdout for the report (--json)
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                states.append(full_state_dict(path, meta))
        except ckpt.read_errors() as exc:
            raise ckpt.unreadable(path, exc, action="export") from None
    want, got = states
    bad: list[tuple[str, float]] = []
    worst, worst_name = 0.0, ""
    for name in sorted(set(want) | set(got)):
        if name not in want or name not in got:
            bad.append((name, float("inf")))
            continue
        a, b = got[name].detach().float(), want[name].detach().float()
        if a.shape != b.shape:
            bad.append((name, float("inf")))
            continue
        rel = float((a - b).abs().max()) / max(float(b.abs().max()), 1e-12) if b.numel() else 0.0
        if rel > worst:
            worst, worst_name = rel, name
        if rel > rtol:
            bad.append((name, rel))
    return {"reference": str(reference), "resumed": str(resumed), "tensors": len(want), "worst": worst_name,
            "worst_rel": worst, "bad": bad}


def report_text(v: Verdict, loss_rtol: float, param_rtol: float) -> str:
    lines = [f"{'step':>6} {'reference':>12} {'resumed':>12} {'relative':>10}"]
    lines += [f"{r['step']:>6} {r['reference']:>12.6f} {r['resumed']:>12.6f} {r['rel']:>10.2e}" for r in v.losses]
    if v.params:
        lines.append(f"parameters at step {v.params['step']}: {v.params['tensors']} tensors, largest relative "
                     f"difference {v.params['worst_rel']:.2e} ({v.params['worst'] or '-'})")
    lines += [f"FAIL: {p}" for p in v.problems]
    lines.append(("continues the same training" if v.ok else "does NOT continue the same training")
                 + f" (losses within {loss_rtol:g}, parameters within {param_rtol:g}, relative)")
    return "\n".join(lines)
