"""`tuner checkpoint inspect CKPT [--json]`: what a checkpoint holds and where it can go.

Reads only the checkpoint's record (`tuner_checkpoint.json`) and its file sizes: no tensor
is loaded, no rank is started.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from . import checkpoint as ckpt
from . import resume_rules
from .artefacts import RunError

#: The part a checkpoint file belongs to, by the first pattern its path matches.
_PARTS = (
    ("optimizer", re.compile(r"(^|/)(optimizer[^/]*|[^/]*optim_states\.pt)($|/)")),
    ("model", re.compile(r"(^|/)(pytorch_model[^/]*|model[^/]*\.safetensors|[^/]*model_states\.pt|adapter[^/]*)($|/)")),
    ("scheduler", re.compile(r"(^|/)scheduler[^/]*$")),
    ("rng", re.compile(r"(^|/)random_states_\d+\.pkl$")),
    ("sampler", re.compile(r"(^|/)sampler[^/]*$")),
)


def part_of(rel: str) -> str:
    for name, pattern in _PARTS:
        if pattern.search(rel):
            return name
    return "other"


def resolve(path: Path) -> Path:
    """A checkpoint folder, or a checkpoints folder / its `latest` (the latest intact one)."""
    path = Path(path)
    ckpt.refuse_link_loop(path, "checkpoint")
    if path.name == ckpt.LATEST and path.is_file():
        path = path.parent
    if not path.is_dir():
        raise RunError(f"checkpoint not found: {path}")
    if not (path / ckpt.META).is_file() and (path / ckpt.LATEST).is_file():
        found = ckpt.latest_intact(path)
        if found is None:
            raise RunError(f"no complete checkpoint in {path}")
        return found
    return path


def describe(path: Path) -> dict[str, Any]:
    path = resolve(path)
    meta = ckpt.read_meta(path, action="export")
    parts: dict[str, int] = {}
    for rel, size in ckpt.file_sizes(path).items():
        parts[part_of(rel)] = parts.get(part_of(rel), 0) + size
    layout = resume_rules.saved_layout(meta)
    info: dict[str, Any] = {
        "checkpoint": str(path), "step": meta.step, "epoch": meta.epoch, "strategy": str(meta.strategy),
        "world_size": meta.world_size, "state_dict": ckpt.state_dict_kind(meta.strategy, meta.state_dict_type),
        "family": meta.family, "tokens_seen": meta.tokens_seen,
        "data_position": {"epoch": meta.epoch, "micro_batches_per_rank": meta.batches_in_epoch,
                          "samples": resume_rules.position_samples(meta) if layout else None},
        "global_batch": ({"micro_batch_size": layout.micro, "gradient_accumulation_steps": layout.accum,
                          "world_size": layout.world, "global_batch": layout.global_batch} if layout else None),
        "bytes": dict(sorted(parts.items())), "total_bytes": sum(parts.values()),
        "resume_into": resume_rules.resumable_into(meta),
        "export_to": [f"a full model (safetensors + config) that from_pretrained loads: "
                      f"tuner checkpoint export {path} --out DIR"],
    }
    return info


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def to_text(info: dict[str, Any]) -> str:
    pos, gb = info["data_position"], info["global_batch"]
    lines = [
        f"checkpoint   {info['checkpoint']}",
        f"step         {info['step']} (epoch {info['epoch']})",
        f"strategy     {info['strategy']} on {info['world_size']} rank(s), {info['state_dict']} state dict",
        f"family       {info['family']}",
        "global batch " + (f"{gb['global_batch']} (micro_batch_size {gb['micro_batch_size']} x "
                           f"gradient_accumulation_steps {gb['gradient_accumulation_steps']} x {gb['world_size']} ranks)"
                           if gb else "not recorded"),
        f"data         epoch {pos['epoch']}, {pos['micro_batches_per_rank']} micro-batches per rank"
        + (f" ({pos['samples']} samples)" if pos["samples"] is not None else ""),
        f"tokens seen  {info['tokens_seen']:,}",
        "sizes        " + ", ".join(f"{k} {_size(v)}" for k, v in info["bytes"].items())
        + f" (total {_size(info['total_bytes'])})",
        "resume into:",
        *(f"  - {line}" for line in info["resume_into"]),
        "export to:",
        *(f"  - {line}" for line in info["export_to"]),
    ]
    return "\n".join(lines)
