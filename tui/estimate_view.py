"""The memory estimate as the wizard shows it, and the quick start's proposal.

Plain Python, no Textual. The numbers are `tuner.compiler.memory.estimate`'s; this module only
lays them out narrowly enough for 80 columns (strategy, per GPU, per host, fits) and maps
the estimator's recommendation (the cheapest strategy that fits: the lowest ZeRO stage
before FSDP before offload) onto settings keys.
"""

from __future__ import annotations

import textwrap
from typing import Any

from ..compiler.keys import paths as K
from ..compiler.plan.strategy import Strategy
from ..compiler.read.block_cache import human_count

GIB = 1024**3

#: The estimator's strategy names -> the wizard's strategy and the settings it needs.
#: In the estimator's order (cheapest first). NVMe offload is not proposed: it needs a
#: path only the person knows.
_OPTIONS: dict[str, dict[str, Any]] = {
    "ddp": {}, "zero1": {}, "zero2": {}, "fsdp2": {}, "zero3": {},
    "zero2+offload": {K.DEEPSPEED_OFFLOAD_OPTIMIZER: "cpu"},
    "fsdp2+offload": {K.FSDP_OFFLOAD_PARAMS: True},
    "zero3+offload": {K.DEEPSPEED_OFFLOAD_OPTIMIZER: "cpu", K.DEEPSPEED_OFFLOAD_PARAM: "cpu"},
}


def _edits(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """An estimator row's name (``zero2+offload``) -> the wizard's strategy choice (the
    compiler's `Strategy` mapped by `Strategy.choice`), its ZeRO stage, and the options."""
    strategy = Strategy(name.split("+")[0])
    stage = {K.DEEPSPEED_ZERO_STAGE: strategy.zero_stage} if strategy.is_deepspeed else {}
    return {"strategy": strategy.choice, **stage, **options}


PROPOSALS: dict[str, dict[str, Any]] = {name: _edits(name, options) for name, options in _OPTIONS.items()}


def _g(n: int) -> str:
    return "-" if not n else f"{n / GIB:.1f}"


#: The table's width: what the Review step has for it at 80x24 beside the step list (45
#: columns). Rows are laid out within it; sentences are wrapped to it (textwrap), so nothing
#: is wrapped by the terminal mid-row (tests/tui/test_snapshots.py, the 80x24 memory table).
WIDTH = 44


def _short(label: str) -> str:
    """A strategy's label within the table's 20 columns ("ZeRO-2+CPU optimizer")."""
    return label.replace(" + ", "+")[:20]


def _wrapped(text: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, subsequent_indent="  ", break_on_hyphens=False) or [""]


def compact_table(est: Any) -> str:
    """The estimate in `WIDTH` columns: every strategy's per-GPU figure and verdict."""
    if est.model is None or est.chosen is None:
        return "\n".join(_wrapped("memory estimate unavailable: " + est.source))
    lines = _wrapped(f"model: {human_count(est.model.parameters)} parameters ({est.source})")
    gpu = f"{est.gpu_capacity / GIB:.1f} GiB" if est.gpu_capacity else "unknown (Hardware: GPU memory GiB)"
    host = f"{est.host_capacity / GIB:.1f} GiB" if est.host_capacity else "unknown (Hardware: host memory GiB)"
    lines += _wrapped(f"target GPU: {gpu}") + _wrapped(f"target host RAM: {host}")
    lines.append(f"  {'strategy':<20}{'per GPU':>8}{'host':>7}  fits")
    rows = [est.chosen] + [r for r in est.rows if r.name != est.chosen.name]
    starred = False
    for r in rows:
        flags = [f for f in (r.fits_gpu, r.fits_host) if f is not None]
        fits = "?" if not flags else ("yes" if all(flags) else "NO")
        if fits == "yes" and r.fits_host is None and r.platform != "cpu":
            fits, starred = "yes*", True  # the GPU fits; the host was not checked
        mark = ">" if r is est.chosen else " "
        lines.append(f"{mark} {_short(r.label):<20}{_g(r.per_gpu or r.device.total):>8}{_g(r.per_host):>7}  {fits}")
    lines += _wrapped("GiB per rank (host: per machine) · > the chosen one")
    if starred:
        lines += _wrapped("* GPU memory only: state the target's host RAM on the Hardware step")
    for n in est.notes:
        lines += _wrapped(f"note: {n}")
    if est.recommendation_line and not est.recommendation:
        lines += _wrapped(f"fix: {est.recommendation_line}")
    return "\n".join(lines)


def proposal(est: Any) -> dict[str, Any]:
    """The quick start's choices: {"options": every strategy that fits, cheapest first, each
    {"name", "label", "per_gpu", "edits", "why"}; "why": why there is none}. The first option's
    fields are repeated at the top level (the proposal)."""
    if est is None or est.model is None:
        why = est.source if est is not None else "the settings do not compile yet"
        return {"name": None, "label": None, "per_gpu": 0, "edits": {}, "why": f"no estimate: {why}", "options": []}
    options = []
    for name in PROPOSALS:
        r = est.row(name)
        if r is None:
            continue
        flags = [f for f in (r.fits_gpu, r.fits_host) if f is not None]
        if flags and all(flags):
            per_gpu = r.per_gpu or r.device.total
            options.append({"name": name, "label": r.label, "per_gpu": per_gpu, "edits": dict(PROPOSALS[name]),
                            "why": f"fits: {per_gpu / GIB:.1f} GiB per GPU"
                            + (f" of {est.gpu_capacity / GIB:.0f}" if est.gpu_capacity else "")})
    on = getattr(est, "with_checkpointing", None)
    if not options and on is not None and on.name in PROPOSALS:  # the estimator's advice: the cheapest fix
        per_gpu = on.per_gpu or on.device.total
        without = est.row(on.name) or est.chosen
        options.append({"name": on.name, "label": f"{on.label} + activation checkpointing", "per_gpu": per_gpu,
                        "edits": {**PROPOSALS[on.name], K.TRAINING_GRADIENT_CHECKPOINTING: True},
                        "why": f"fits with activation checkpointing: {per_gpu / GIB:.1f} GiB per GPU"
                        + (f" of {est.gpu_capacity / GIB:.0f}" if est.gpu_capacity else "")
                        + (f" ({(without.per_gpu or without.device.total) / GIB:.0f} without)" if without else "")})
    if options:
        return {**options[0], "options": options}
    return {"name": None, "label": None, "per_gpu": 0, "edits": {}, "options": [],
            "why": "nothing fits the stated GPU memory (activation checkpointing, more GPUs, LoRA, "
                   "or NVMe offload in the builder)"}
