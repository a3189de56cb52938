"""Which checkpoint a run can resume, and where the data position lands (pure, no torch).

What a resume keeps when the world size changes is the **global batch**: micro batch x
gradient accumulation x ranks. With it kept, optimizer step ``s`` trains the samples
``[s*G, (s+1)*G)`` of the epoch's shuffled order at any world size (accelerate's seedable
sampler draws the order from ``seed + epoch`` alone, and its batch sharding gives rank ``r``
the micro-batches ``r, r+W, r+2W, ...``), so the resumed run trains exactly the samples the
uninterrupted one would have, none repeated or skipped, and the LR schedule (which counts
optimizer steps) goes on where it stopped. A world that cannot keep the global batch is
refused before any rank starts, naming the settings that would keep it; ``tuner run
--new-global-batch`` continues anyway and says how the schedule and the position were carried.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..compiler.keys.settings import TrainingSettings
from ..compiler.plan.strategy import Strategy
from .artefacts import RunError
from .checkpoint import CheckpointMeta, HeldState


@dataclass(frozen=True)
class Layout:
    """How one run cuts its data: micro batch per rank, accumulation steps, ranks."""
    micro: int
    accum: int
    world: int

    @classmethod
    def of(cls, training: TrainingSettings, world: int) -> Layout:
        """The layout of a run's ``[training]`` settings on `world` ranks."""
        return cls(training.micro_batch_size, training.gradient_accumulation_steps, world)

    @property
    def global_batch(self) -> int:
        return self.micro * self.accum * self.world

    def describe(self) -> str:
        return (f"{self.global_batch} (micro_batch_size {self.micro} x gradient_accumulation_steps {self.accum} "
                f"x {self.world} ranks)")


def saved_layout(meta: CheckpointMeta) -> Layout | None:
    """The layout the checkpoint was written with (None for a record from before tuner kept it)."""
    if meta.micro_batch_size < 1 or meta.gradient_accumulation_steps < 1:
        return None
    return Layout(meta.micro_batch_size, meta.gradient_accumulation_steps, meta.world_size)


def keeping_settings(global_batch: int, world: int, micro: int, accum: int) -> list[str]:
    """The settings that keep `global_batch` on `world` ranks: the accumulation for this micro
    batch, the micro batch for this accumulation, else every pair; empty when none can."""
    if global_batch % world:
        return []
    per_rank = global_batch // world
    fixes = []
    if per_rank % accum == 0:  # first: the same accumulation weighs tokens exactly alike
        fixes.append(f"training.micro_batch_size = {per_rank // accum}")
    if per_rank % micro == 0:
        fixes.append(f"training.gradient_accumulation_steps = {per_rank // micro}")
    if not fixes:
        fixes = [f"training.micro_batch_size = {m} with training.gradient_accumulation_steps = {per_rank // m}"
                 for m in range(1, per_rank + 1) if per_rank % m == 0]
    return fixes


def _worlds_that_keep(global_batch: int, near: int) -> list[int]:
    return [w for w in range(1, max(global_batch, near) + 1) if global_batch % w == 0][:8]


def check_global_batch(meta: CheckpointMeta, now: Layout, ckpt: Path, new_global_batch: bool = False) -> str:
    """Refuse a resume whose layout changes the global batch (unless `new_global_batch`);
    returns a line saying what was kept or how it was carried ('' when nothing changed)."""
    then = saved_layout(meta)
    if then is None:
        if meta.world_size != now.world:
            raise RunError(f"checkpoint {ckpt} was written by {meta.world_size} ranks and does not record its micro "
                           f"batch and accumulation (written before tuner kept them), so its data position cannot "
                           f"be carried to {now.world} ranks: resume it with hardware.num_processes = "
                           f"{meta.world_size}, or start a new run from `tuner checkpoint export {ckpt} --out DIR`")
        return ""
    if then == now:
        return ""
    if then.global_batch == now.global_batch:
        return (f"global batch kept: {then.describe()} -> {now.describe()}; the run continues at step {meta.step} "
                f"with the samples it would have trained next")
    if new_global_batch:
        return (f"new global batch {then.global_batch} -> {now.global_batch} (--new-global-batch): the optimizer "
                f"step count and the LR schedule continue from step {meta.step} (the schedule counts optimizer "
                f"steps, not samples); the data position is carried in samples of the epoch "
                f"({position_samples(meta)} already trained)")
    fixes = keeping_settings(then.global_batch, now.world, now.micro, now.accum)
    if fixes:
        how = "set " + ", or ".join(fixes)
    else:
        worlds = ", ".join(str(w) for w in _worlds_that_keep(then.global_batch, now.world))
        how = (f"no micro batch and accumulation on {now.world} ranks make {then.global_batch}: run on a world "
               f"size that divides it ({worlds})")
    raise RunError(f"checkpoint {ckpt} was trained with global batch {then.describe()}; this run has "
                   f"{now.describe()}, which would change the training the resume continues; to keep it, {how}; "
                   f"or pass --new-global-batch to continue with the new global batch on purpose")


def position_samples(meta: CheckpointMeta) -> int:
    """Samples of the current epoch the checkpoint's run had trained (all ranks together)."""
    then = saved_layout(meta)
    return meta.batches_in_epoch * (then.micro * then.world if then else 1)


def batches_to_skip(meta: CheckpointMeta, now: Layout) -> tuple[int, int]:
    """(micro-batches each rank of `now` skips in the epoch, samples that lands short of the
    saved position). With the global batch kept the second is always 0."""
    then = saved_layout(meta)
    if then is None or (then.micro, then.world) == (now.micro, now.world):
        return meta.batches_in_epoch, 0
    samples = position_samples(meta)
    per_round = now.micro * now.world
    return samples // per_round, samples % per_round


#: Strategies whose checkpoints the portable form reads, and those it loads into
#: (portable_state.py; ZeRO 1-3 through DeepSpeed's per-parameter API).
_PORTABLE = {Strategy.DDP, Strategy.FSDP2, Strategy.ZERO1, Strategy.ZERO2, Strategy.ZERO3}
_PORTABLE_FROM = _PORTABLE_INTO = _PORTABLE


def carried_across(meta: CheckpointMeta, strategy: Strategy, state_dict_type: HeldState) -> bool:
    """Whether this resume goes through the portable form: another backend (or FSDP's other
    state dict kind) that it reads and loads."""
    other = meta.strategy != strategy or (meta.strategy.is_fsdp and meta.state_dict_type != state_dict_type)
    return other and meta.strategy in _PORTABLE_FROM and strategy in _PORTABLE_INTO


def check_strategy(meta: CheckpointMeta, strategy: Strategy, state_dict_type: HeldState, world_size: int,
                   ckpt: Path) -> None:
    """Refuse resuming a checkpoint written by another strategy, saying how to go on."""
    convert = (f"convert it to a full model with `tuner checkpoint export {ckpt} --out DIR` and start a new run "
               f"from it (model.path = \"DIR\")")
    if carried_across(meta, strategy, state_dict_type):
        return
    ds_then, ds_now = meta.strategy.is_deepspeed, strategy.is_deepspeed
    if ds_then != ds_now:
        raise RunError(f"checkpoint {ckpt} was written {'with' if ds_then else 'without'} DeepSpeed "
                       f"({meta.strategy}) and this run {'uses' if ds_now else 'does not use'} DeepSpeed ({strategy}); "
                       f"a checkpoint cannot be resumed after enabling or disabling DeepSpeed: {convert}")
    fsdp_then, fsdp_now = meta.strategy.is_fsdp, strategy.is_fsdp
    if meta.strategy != strategy and (fsdp_then or fsdp_now):
        raise RunError(f"checkpoint {ckpt} was written with {meta.strategy} and this run uses {strategy}; "
                       f"sharded model and optimizer states differ between them: {convert}")
    if fsdp_then and meta.state_dict_type != state_dict_type:
        raise RunError(f"checkpoint {ckpt} holds a {meta.state_dict_type} state dict and this run is compiled for "
                       f"{state_dict_type}; set checkpoint.state_dict_type = \"{meta.state_dict_type}\" to resume it, "
                       f"or {convert}")
    if meta.world_size != world_size and strategy in {Strategy.FSDP1, Strategy.SINGLE} | _ZERO_SAME_WORLD:
        raise RunError(f"checkpoint {ckpt} was written by {meta.world_size} ranks and this run has {world_size}; "
                       f"{strategy} resumes only at the same world size (its optimizer state is saved per rank): "
                       f"run with hardware.num_processes = {meta.world_size}, or {convert}")


#: ZeRO stages resumed only at the world size that wrote them: none, since DeepSpeed's
#: universal checkpoint carries ZeRO 1-3 to another (checkpoint_convert.py).
_ZERO_SAME_WORLD: set[Strategy] = set()


def check_compatible(meta: CheckpointMeta, strategy: Strategy, state_dict_type: HeldState, now: Layout, ckpt: Path,
                     new_global_batch: bool = False) -> str:
    """Refuse a checkpoint this run cannot continue (before any rank starts, and again on
    every rank); returns the line saying what a world-size change kept ('' when none)."""
    check_strategy(meta, strategy, state_dict_type, now.world, ckpt)
    return check_global_batch(meta, now, ckpt, new_global_batch)


def resumable_into(meta: CheckpointMeta) -> list[str]:
    """What `tuner checkpoint inspect` lists: the builds this checkpoint resumes into."""
    kind = meta.state_dict_type
    layout = saved_layout(meta)
    same = f"{meta.strategy} ({kind} state dict)"
    if meta.strategy in {Strategy.FSDP1, Strategy.SINGLE} | _ZERO_SAME_WORLD or layout is None:
        return [f"{same} on {meta.world_size} rank(s) (the world size that wrote it)"]
    worlds = ", ".join(str(w) for w in _worlds_that_keep(layout.global_batch, meta.world_size))
    into = [f"{same} on {worlds} ranks, keeping the global batch {layout.global_batch} "
            f"(micro_batch_size x gradient_accumulation_steps x ranks); another global batch with --new-global-batch"]
    if meta.strategy in _PORTABLE_FROM:
        others = [str(s) if s != meta.strategy else f"{s} ({'full' if kind == 'sharded' else 'sharded'} state dict)"
                  for s in sorted(_PORTABLE_INTO) if s != meta.strategy or s.is_fsdp]
        into.append(f"{', '.join(others)} (ZeRO with or without CPU offload; FSDP2 either state dict kind) on the "
                    f"same world sizes: model, Adam's moments and step count, LR schedule and data position "
                    f"carried by parameter name")
    return into
