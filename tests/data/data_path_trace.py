"""Trace one chat row from its JSONL file to a training batch, as a rank does, and count how
often the running code crosses between ``runtime/data_sources/`` and ``runtime/families/``
(issue 38, item 3: "a chat row goes JSONL -> data_sources -> families and back 8 times").

A crossing: `sys.setprofile` sees every Python call and return; at each one that enters or
returns into a frame of one of the two folders, that folder is "where the row is"; a crossing
is a change of it. Frames of other code (datasets, transformers, torch, the rest of tuner)
leave it where it was. The rank's path is the trainer's: `data_sources.driver.rank_data`
(the datasets, the batch sampler, the collate function), then one batch through torch's
``DataLoader``.

    python -m tests.data.data_path_trace        # prints the count (builds a tiny model)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

AREAS = {"tuner.runtime.data_sources": "data_sources", "tuner.runtime.families": "families"}


def area_of(module: str) -> str | None:
    for prefix, name in AREAS.items():
        if module == prefix or module.startswith(prefix + "."):
            return name
    return None


class Crossings:
    """A profile function counting changes between the two areas, with the trail of them."""

    def __init__(self) -> None:
        self.where: str | None = None
        self.count = 0
        self.trail: list[str] = []

    def __call__(self, frame, event: str, arg: Any) -> None:
        if event == "call":
            f = frame
        elif event == "return":
            f = frame.f_back
        else:
            return
        if f is None:
            return
        module = f.f_globals.get("__name__", "")
        if not module.startswith("tuner."):
            return
        area = area_of(module)
        if area is None or area == self.where:
            return
        if self.where is not None:
            self.count += 1
            self.trail.append(f"{self.where} -> {area} ({module}.{f.f_code.co_name})")
        self.where = area


def one_chat_row(project: Path) -> Path:
    """A JSONL file of one conversation (a system prompt and two turns)."""
    row = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"},
                        {"role": "assistant", "content": "hi"}, {"role": "user", "content": "what is two and two"},
                        {"role": "assistant", "content": "four"}]}
    path = project / "one.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return path


def trace_row_to_batch(model: Path, project: Path) -> Crossings:
    """Crossings on one rank's way from the file to the first batch (world size 1)."""
    from torch.utils.data import DataLoader
    from tuner.compiler.keys.settings import Settings
    from tuner.runtime.data_sources.driver import rank_data
    from tuner.runtime.families.base import FamilyContext
    from tuner.runtime.families.causal_lm import CausalLMFamily

    one_chat_row(project)
    s = Settings.from_dict({"model": {"path": str(model)}, "training": {"micro_batch_size": 1},
                            "data": {"path": "one.jsonl", "seq_len": 64, "validation_split": 0.0}})
    fam = CausalLMFamily(FamilyContext(settings=s, base_dir=project, rank=0, world_size=1))
    counter = Crossings()
    sys.setprofile(counter)
    try:
        data = rank_data(fam, world=1)
        kw: dict[str, Any] = {"batch_sampler": data.batch_sampler(data.train, s.training, 1, True)}
        if kw["batch_sampler"] is None:
            kw["batch_size"] = 1
        batch = next(iter(DataLoader(data.train, collate_fn=data.collate, **kw)))
    finally:
        sys.setprofile(None)
    assert batch["input_ids"].shape[0] == 1
    return counter


def main() -> None:
    import tempfile

    from tests.tiny_chat_llama import build_tiny_chat_llama

    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_chat_llama(Path(tmp) / "model")
        project = Path(tmp) / "project"
        project.mkdir()
        c = trace_row_to_batch(model, project)
    print(f"crossings between runtime/data_sources/ and runtime/families/, one chat row to a batch: {c.count}")
    for line in c.trail:
        print("  " + line)


if __name__ == "__main__":
    main()
