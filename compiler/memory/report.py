"""The estimate's result (`Estimate`) and its side-by-side table."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..keys import paths as K
from .model import ModelSize
from .per_rank import GIB, LABELS, StrategyEstimate


@dataclass
class Estimate:
    """The estimate for one settings file: the chosen strategy and the comparison."""

    model: ModelSize | None
    source: str
    chosen: StrategyEstimate | None
    rows: list[StrategyEstimate]
    gpu_capacity: int = 0
    """Bytes per GPU the estimate is checked against; 0 = unknown."""
    host_capacity: int = 0
    capacity_source: str = ""
    recommendation: str | None = None
    """The cheapest compared strategy that fits as configured (the lowest ZeRO stage /
    cheapest FSDP option); None when none does."""
    notes: list[str] = field(default_factory=list)
    gpu_margin: float = 0.0
    """Share of GPU memory kept free (fragmentation, workspaces): fits below (1 - margin)."""
    recommendation_line: str = ""
    """What to do, one line: the strategy that fits, the switch that makes one fit, or how
    many GPUs / machines would be needed."""
    advice: list[str] = field(default_factory=list)
    """Why nothing (or not the chosen strategy) fits, and what removes the bottleneck."""
    with_checkpointing: StrategyEstimate | None = None
    """The strategy that fits once activation checkpointing is on, where that is the fix
    the advice names (the quick start proposes it)."""

    @property
    def usable_gpu(self) -> int:
        """GPU bytes a strategy may use (the capacity less the margin); 0 = unknown."""
        return int(self.gpu_capacity * (1 - self.gpu_margin))

    @property
    def fits(self) -> bool | None:
        if self.chosen is None:
            return None
        return fits(self.chosen)

    def row(self, name: str) -> StrategyEstimate | None:
        return next((r for r in self.rows if r.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": asdict(self.model) if self.model else None, "source": self.source,
            "chosen": self.chosen.to_dict() if self.chosen else None,
            "strategies": [r.to_dict() for r in self.rows],
            "gpu_capacity": self.gpu_capacity, "host_capacity": self.host_capacity,
            "gpu_margin": self.gpu_margin, "usable_gpu": self.usable_gpu,
            "capacity_source": self.capacity_source, "fits": self.fits,
            "recommendation": self.recommendation, "recommendation_line": self.recommendation_line,
            "advice": self.advice, "notes": self.notes,
        }

    def capacity_line(self) -> str:
        cap = []
        if self.gpu_capacity:
            cap.append(f"GPU {gib(self.gpu_capacity)}, fits below {100 * (1 - self.gpu_margin):.0f}% = "
                       f"{gib(self.usable_gpu)} ({100 * self.gpu_margin:.0f}% kept for fragmentation "
                       "and workspace)")
        cap.append(f"host {gib(self.host_capacity)}" if self.host_capacity else
                   "host RAM unknown (state hardware.host_memory_gib: the target machine's)")
        return "capacity: " + "; ".join(cap) + (f" ({self.capacity_source})" if self.capacity_source else "")

    def table(self) -> str:
        """The side-by-side table (what `tuner estimate` prints and the wizard shows)."""
        if self.model is None or self.chosen is None:
            return "memory estimate unavailable: " + self.source
        lines = [f"model: {fmt_count(self.model.parameters)} parameters ({self.source})"]
        if self.model.uncertain:
            lines.append(f"warning: {self.model.uncertain}")
        if not self.gpu_capacity and not self.host_capacity:
            lines.append("capacity: unknown (state hardware.gpu_memory_gib / host_memory_gib or run tuner doctor)")
        else:
            lines.append(self.capacity_line())
        header = (f"  {'strategy':<33}{'params':>9}{'grads':>9}{'optim':>9}{'master':>9}{'activ':>9}"
                  f"{'buffers':>9}{'per GPU':>10}{'host/rank':>10}{'per host':>10}{'NVMe':>9}  fits")
        lines += ["", "per rank, GiB (params..buffers on the device; offloaded state under host/NVMe)", header,
                  "  " + "-" * (len(header) - 2)]
        for r in [self.chosen] + [r for r in self.rows if r.name != self.chosen.name]:
            d = r.device
            mark = ">" if r is self.chosen else " "
            ok = {True: "yes", False: "NO", None: "?"}[fits(r)]
            if fits(r) is False:
                ok += " (" + "+".join(w for w, f in (("GPU", r.fits_gpu), ("host", r.fits_host)) if f is False) + ")"
            label = r.label + (" (chosen)" if r is self.chosen else "")
            lines.append(f"{mark} {label:<33}{_g(d.params):>9}{_g(d.grads):>9}{_g(d.optimizer):>9}{_g(d.master):>9}"
                         f"{_g(d.activations):>9}{_g(d.buffers):>9}{_g(r.per_gpu or d.total):>10}"
                         f"{_g(r.host.total):>10}{_g(r.per_host):>10}{_g(r.nvme_per_host):>9}  {ok}")
        c = self.chosen
        lines.append("")
        how = f" ({c.ranks_per_host} fp32 copies: one per rank)"
        if c.efficient_loading:
            how = (" (zero.Init: one fp32 layer per rank)" if c.loading_switch == K.DEEPSPEED_ZERO3_INIT
                   else " (one fp32 copy per machine)")
        lines.append(f"loading: {gib(c.load_peak_host)} host RAM per machine while the weights load{how}")
        lines.append(f"full state dict save: +{gib(c.full_save_host)} host RAM on the main host"
                     + ("" if c.full_save_needed else " (not needed: sharded checkpoints, no export)"))
        if self.recommendation_line:
            lines.append(f"recommended: {self.recommendation_line}")
        lines += [f"advice: {a}" for a in self.advice]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def fits(r: StrategyEstimate) -> bool | None:
    flags = [f for f in (r.fits_gpu, r.fits_host) if f is not None]
    return all(flags) if flags else None


def gib(n: int | float) -> str:
    return f"{n / GIB:.2f} GiB"


def _g(n: int) -> str:
    return "-" if not n else (f"{n / GIB:.2f}" if n >= 0.01 * GIB else f"{n / 1024**2:.1f}M")


def fmt_count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


def label(name: str | None) -> str:
    return LABELS.get(name or "", name or "")
