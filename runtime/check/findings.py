"""The checks `tuner check` runs, what one found, and the report (text or JSON).

Every check has a name (``--skip NAME`` turns it off), a part (``launch`` or ``run``) and a
one-line description; docs/check.md explains each one. A `Finding` is one check's verdict
on one machine or rank: ``ok``, ``fault`` (exit 1) or ``skipped`` (not applicable, or
turned off), with what it saw and, for a fault, the fix.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

#: name -> (part, what it checks). The order is the report's.
CHECKS: dict[str, tuple[str, str]] = {
    "build": ("launch", "the build directory loads and its artefacts are as compiled"),
    "same-build": ("launch", "every machine has the same build (manifest hash)"),
    "versions": ("launch", "tuner/torch/accelerate/deepspeed/transformers as compiled, the same on every machine"),
    "known-faults": ("launch", "no known silent fault of the plan (the compiler's table: versions, LoRA/FSDP2, ...)"),
    "script": ("launch", "the training script (or module) exists on every machine"),
    "model-path": ("launch", "model.path exists on every machine"),
    "data-path": ("launch", "data.path and data.validation_path exist on every machine"),
    "nvme-path": ("launch", "deepspeed.nvme_path is a writable directory on every machine (NVMe offload)"),
    "output": ("launch", "the output directory is writable"),
    "disk": ("launch", "free disk at the output for one checkpoint (from the estimate)"),
    "host-ram": ("launch", "available host RAM for the plan (from the estimate)"),
    "address": ("launch", "machine 0's address is an address of machine 0"),
    "port": ("launch", "machine 0's port is free and every machine reaches it"),
    "network-interface": ("launch", "the socket interface is set, and exists, when there are several routes"),
    "gpus": ("launch", "GPU count and memory on GPU targets, and the NCCL version"),
    "rehearsal": ("run", "every rank ran the rehearsal and reported"),
    "collectives": ("run", "no rank waits in a collective the others never join (bounded by TUNER_PG_TIMEOUT)"),
    "world-size": ("run", "world size and rank every Accelerator/PartialState sees equal the plan"),
    "distributed-type": ("run", "accelerate's distributed type is the plan's"),
    "prepared": ("run", "the model, optimizer and data loader went through Accelerator.prepare"),
    "sharding": ("run", "parameters are sharded as the strategy says (DTensor, flat param, ZeRO partitions)"),
    "memory": ("run", "per-rank model state within 10% of the estimate (tuner's trainer, a script on the settings' model)"),
    "data-sharded": ("run", "each rank reads its own share of the data (sample identity), and its batches differ"),
    "trainable": ("run", "the trainable parameters are those the plan trains (full or LoRA)"),
    "optimizer-params": ("run", "the optimizer holds the model's trainable parameters"),
    "optimizer-step": ("run", "the optimizer steps, and gradients are zeroed between steps"),
    "params-change": ("run", "trainable parameters change after a step"),
    "grads": ("run", "gradients are finite and non-zero"),
    "loss": ("run", "the loss is finite"),
    "lr": ("run", "the learning rate is positive and follows the settings' schedule (trainer, or a script at its lr)"),
    "batch-arithmetic": ("run", "DeepSpeed: micro x accumulation x world = the settings' batch, and the loader's"),
    "mixed-precision": ("run", "mixed precision is active as stated"),
    "dtypes": ("run", "parameter dtypes are uniform where FSDP needs it"),
    "packing": ("run", "packed rows (position_ids restarting in a row) attend per document"),
    "negatives": ("run", "a contrastive loss's in-batch negatives are gathered across the data-parallel ranks"),
    "resume": ("run", "after load_state, the data continues where the checkpoint's epoch stopped"),
    "ema": ("run", "an EMA of the weights that steps is what a save writes"),
    "save": ("run", "what a rank saves holds whole tensors, not its FSDP2 shards"),
}


@dataclass
class Finding:
    check: str
    status: str  # "ok" | "fault" | "skipped"
    where: str  # "machine 1", "rank 0", "all"
    saw: str
    fix: str = ""
    run: int = 0
    """Which Accelerator of the rank (1, 2, ...) a run check is about; 0: the only one."""

    def line(self) -> str:
        mark = {"ok": "ok   ", "fault": "FAULT", "skipped": "skip "}[self.status]
        text = f"{mark} {self.check:<18} {self.where:<10} {self.saw}"
        return text + (f"\n      fix: {self.fix}" if self.fix else "")


def ok(check: str, where: str, saw: str) -> Finding:
    return Finding(check, "ok", where, saw)


def fault(check: str, where: str, saw: str, fix: str) -> Finding:
    return Finding(check, "fault", where, saw, fix)


def skipped(check: str, where: str, why: str) -> Finding:
    return Finding(check, "skipped", where, why)


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    skip: frozenset[str] = frozenset()

    def add(self, items: list[Finding]) -> None:
        for f in items:
            if f.check in self.skip and f.status != "skipped":
                f = skipped(f.check, f.where, "turned off (--skip)")
            self.findings.append(f)

    @property
    def faults(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "fault"]

    @property
    def exit_code(self) -> int:
        return 1 if self.faults else 0

    def text(self) -> str:
        order = {name: i for i, name in enumerate(CHECKS)}
        rows = sorted(self.findings, key=lambda f: (order.get(f.check, 99), f.where))
        lines = [f.line() for f in rows]
        took = ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items())
        n = len(self.faults)
        lines.append(f"tuner check: {n} fault{'s' if n != 1 else ''} found" if n else "tuner check: every check passed")
        if took:
            lines[-1] += f" ({took})"
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({"ok": not self.faults, "exit_code": self.exit_code, "timings_s": self.timings,
                           "faults": [asdict(f) for f in self.faults],
                           "findings": [asdict(f) for f in self.findings]}, indent=2)
