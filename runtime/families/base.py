"""The interface every model family implements; the trainer relies on nothing else.

A family answers the model-specific questions of a run: how to build the model (for real,
or on the meta device for inspection), which module classes FSDP wraps as units, which
parameters are optimised, what the data is, what the loss of a batch is, how validation is
scored, and how a full model is written so that ``from_pretrained`` loads it. Frozen helpers
(a diffusion model's text encoder and VAE) are family attributes, never part of the model
the trainer prepares, so nothing shards or optimises them.

Life cycle in one rank of `tuner run` (the trainer's order)::

    fam = get_family(settings.model.family)(ctx)
    model = fam.build_model()                       # same seed on every rank
    fam.prepare_model(model)                        # gradient checkpointing, LoRA, dtype
    data = data_sources.driver.rank_data(fam)       # file -> batch, through the hooks below
    loader = DataLoader(data.train, collate_fn=data.collate, ...)
    ... accelerator.prepare(model, optimizer, loader, scheduler) ...
    loss = fam.loss(model, batch)                   # model is the prepared (wrapped) model
    metrics = fam.evaluate(model, val_loader, accelerator)
    fam.export(full_state_dict, out_dir)            # rank 0 only, plain CPU tensors

`tuner checkpoint export` builds the family from a checkpoint's manifest and calls only
`export`, so `export` must not need a trained model object.

The data path is runtime/data_sources/'s (`driver.py`): reading, formats, templates, packing,
streaming, tokenising, collation, batch sampling. A family answers its data hooks only:
`data_recipe` (`recipes.py`: a language model's tokenizer and packing, an embedding model's
tokenizer, a diffusion model's bucket multiple and caption tokenizer) and `prepare_examples`
(rows to the family's own examples where they need its models: diffusion's latent cache).
Every optional method is declared here with its default, so the trainer and the commands
call it without looking it up.

Rules for implementers:

* Everything must work offline: nothing may download weights, tokenizers or data.
  ``model.path`` is a local directory or ``builtin`` / ``builtin:NAME``.
* `build_model` must be deterministic given the seeded RNG (every rank builds the same
  initial weights; the trainer seeds before calling it).
* `loss` receives the wrapped model (DDP, FSDP, DeepSpeed engine); call it, do not reach
  into ``.module``. Return a scalar tensor averaged over the batch's own units (tokens,
  pairs, images); the trainer does the averaging across ranks and accumulation steps.
* `batch_units` says how many tokens (or samples) a batch holds, for throughput.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported by the runtime, never by the compiler
    import torch

    from ...compiler.keys.settings import Settings
    from .recipes import DataRecipe


class FamilyError(Exception):
    """A problem the user can fix (bad model path, unreadable data): printed without a traceback."""


@dataclass
class FamilyContext:
    """What a family gets from the runtime."""

    settings: Settings
    base_dir: Path
    """Directory that relative paths in the settings are resolved against (the settings file's)."""
    seed: int = 42
    rank: int = 0
    world_size: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form values a family may need from the runtime (kept for forward compatibility).
    Before each validation the trainer sets ``step`` (optimizer steps done) and
    ``output_dir`` (the run's output folder), e.g. for OUTPUT_DIR/validation/step-N/."""

    def resolve(self, path: str) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else (self.base_dir / p)


class Family:
    """Base class of model families. Subclasses override what their family needs."""

    #: settings ``model.family`` value this class serves.
    name: str = ""
    #: Unit counted by `batch_units` (shown as "<unit>/s" in the progress bar).
    unit: str = "samples"
    #: Whether `export_streamed` writes an export shard by shard (else `export` gets the full state).
    streams_export: bool = False

    def __init__(self, ctx: FamilyContext) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        #: This rank's streamed training rows (`data_sources.stream.StreamRows`) when the data
        #: is streamed (the driver sets it): its position is saved with every checkpoint.
        self.stream: Any = None

    # -- model ----------------------------------------------------------------------
    def build_model(self, meta: bool = False) -> torch.nn.Module:
        """The model to train, on CPU with real weights (``meta=False``) or on the meta device.

        ``meta=True`` builds the structure only (no memory, no weights read): used by block
        detection and the memory estimator.
        """
        raise NotImplementedError

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Apply training-time changes before sharding: gradient checkpointing, LoRA,
        freezing. Returns the model to train (may be a new object, e.g. a PEFT model)."""
        return model

    def wrap_classes(self, model: torch.nn.Module) -> list[str]:
        """Module class names FSDP wraps as units when the settings name none
        (default: the model's ``_no_split_modules``)."""
        return list(getattr(model, "_no_split_modules", None) or [])

    def trainable_parameters(self, model: torch.nn.Module) -> Iterable[torch.nn.Parameter]:
        """Parameters the optimizer updates (default: every parameter that requires grad)."""
        return [p for p in model.parameters() if p.requires_grad]

    # -- data (runtime/data_sources/driver.py drives; these are the family's answers) ---------
    def data_recipe(self) -> DataRecipe:
        """What the data driver needs from this family (`recipes.py`): a language model's
        tokenizer and packing, an embedding model's tokenizer, a diffusion model's bucket
        multiple and caption tokenizer."""
        raise NotImplementedError

    def prepare_examples(self, train: Any, val: Any | None) -> None:
        """After the driver built the datasets, on every rank: turn rows into the family's
        own examples where they need its models (a diffusion model encodes latents and
        caption embeddings into its cache). Default: nothing."""

    def batch_units(self, batch: dict[str, torch.Tensor]) -> int:
        """How many `unit`s a batch holds (tokens for language models)."""
        first = next(iter(batch.values()))
        return int(first.shape[0])

    def step_metrics(self) -> dict[str, float]:
        """Metrics of the batches since the last call, logged with each step (default: none)."""
        return {}

    # -- optimisation ---------------------------------------------------------------
    def loss(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Scalar training loss of one micro-batch."""
        raise NotImplementedError

    def evaluate(self, model: torch.nn.Module, batches: Iterable[dict[str, torch.Tensor]],
                 accelerator: Any) -> dict[str, float]:
        """Validation metrics over this rank's share of the validation data, reduced across
        ranks. Runs on every rank (sharded models need every rank in the forward).
        Default: the mean of `loss`, as ``{"val_loss": ...}``."""
        import torch

        total = torch.zeros(2, dtype=torch.float64, device=accelerator.device)
        with torch.no_grad():
            for batch in batches:
                total[0] += self.loss(model, batch).detach().double()
                total[1] += 1
        total = accelerator.reduce(total, reduction="sum")
        return {"val_loss": float(total[0] / total[1].clamp(min=1))}

    # -- export ---------------------------------------------------------------------
    def export(self, state_dict: dict[str, torch.Tensor], out_dir: Path) -> None:
        """Write a full model (safetensors + config, and tokenizer or processor) that the
        family's ``from_pretrained`` loads. `state_dict` is the full, gathered state of the
        model `build_model` returns (after `prepare_model`), as CPU tensors. Rank 0 only."""
        raise NotImplementedError

    def export_streamed(self, source: Any, out_dir: Path, max_shard_size: Any) -> bool:
        """`export`'s files written shard by shard from a checkpoint's `Source` (never the
        whole model in memory); False when it cannot this time, and `export` runs. Called only
        when `streams_export` is True."""
        return False

    # -- run hooks (optional; all no-ops by default) -----------------------------------
    # Called by the trainer on EVERY rank, so a hook may use collectives.
    def on_prepared(self, model: torch.nn.Module, accelerator: Any) -> None:
        """After ``accelerator.prepare``: the model is wrapped/sharded (e.g. create EMA shadows)."""

    def on_optimizer_step(self, model: torch.nn.Module, step: int) -> None:
        """After each optimizer step (``step`` is the new step count), e.g. an EMA update."""

    def save_state(self, folder: Path, accelerator: Any) -> None:
        """Add family state (e.g. EMA) to a checkpoint folder being written (before it is
        published). The default saves a stream's position (``data_stream_rank<R>.json``)."""
        if self.stream is not None:
            self.stream.save(folder)

    def load_state(self, folder: Path, accelerator: Any) -> None:
        """Restore what `save_state` wrote, after ``accelerator.load_state`` on resume."""
        if self.stream is not None and not self.stream.load(folder):
            raise FamilyError(f"{folder} holds no stream position for rank {self.ctx.rank} (data_stream_rank"
                              f"{self.ctx.rank}.json); resume a streamed run from a checkpoint it wrote")

    def on_train_end(self, model: torch.nn.Module, accelerator: Any) -> None:
        """After the last step, before `export` (e.g. gather EMA weights for export)."""

    def describe(self) -> str:
        """One line for the start-of-run summary."""
        return f"{self.name} ({self.settings.model.path})"
