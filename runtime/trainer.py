"""One rank of `tuner run`: build, prepare, train, validate, checkpoint, export.

Family-agnostic: everything model-specific goes through `families.Family`. Strategy-
agnostic too: DDP, FSDP2, FSDP v1 and DeepSpeed ZeRO are accelerate's own code paths,
chosen by the environment the launcher set from the compiled artefacts (on CPU, after the
narrow correction in `cpu_shim`). `Trainer.train()` reads like its table of contents.
Code of your own (and tuner's tests) joins in through callbacks (`callbacks.TrainerCallback`).
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from ..compiler.plan.strategy import Strategy
from . import checkpoint as ckpt
from . import cpu_shim, knobs, portable_state, rank_guard, resume_agree, tracking
from .artefacts import Artefacts, RunError
from .callbacks import Callbacks
from .checkpoint_io import quick_save
from .data_sources.driver import rank_data
from .families import get_family
from .families.base import FamilyContext
from .full_disk import full_disk_named
from .memory import rank_state_bytes
from .optim import offload_optimizer_block, optimizer_and_scheduler
from .progress import Reporter
from .run_plan import RankPlan


class Trainer:
    def __init__(self, arts: Artefacts, plan: RankPlan | None = None, callbacks: Iterable[Any] = ()) -> None:
        """`plan`: the ranks' part of the run plan, decided before any rank started
        (runtime/run_plan.py: what to resume, the step count); None: a fresh start."""
        self.arts = arts
        self.s = arts.settings
        if plan is None and self.s.checkpoint.resume:
            raise RunError(f"checkpoint.resume = {self.s.checkpoint.resume!r} is decided before the ranks start, by "
                           "`tuner run` (its run plan, runtime/run_plan.py); this trainer was started without one: "
                           "start it with `tuner run`, or give it the plan (Trainer(arts, plan=...))")
        self.plan = plan or RankPlan()
        self.max_steps_override = self.plan.max_steps
        self.strategy = arts.plan.strategy
        self.is_ds = self.strategy.is_deepspeed
        self.out = arts.output_dir
        self.ckdir = ckpt.checkpoints_dir(self.out)
        self.callbacks = Callbacks(callbacks)  # runtime/callbacks.py: your code, on every rank

    # -- table of contents ------------------------------------------------------------
    def train(self) -> None:
        self.setup_accelerator()
        self.build()
        self.prepare()
        self.summarise()
        self.maybe_resume()
        self.callbacks.fire("on_train_begin", self)
        self.loop()
        self.finish()

    # -- setup ------------------------------------------------------------------------
    def setup_accelerator(self) -> None:
        from accelerate import Accelerator
        from accelerate.utils import DataLoaderConfiguration, InitProcessGroupKwargs, set_seed

        timeout = timedelta(seconds=knobs.pg_timeout_s())
        if self.is_ds:
            import deepspeed

            # DeepSpeed's comm layer wraps the torch process group; create it with our deadline.
            if not torch.distributed.is_initialized():
                backend = "gloo" if not torch.cuda.is_available() else None
                deepspeed.init_distributed(dist_backend=backend, timeout=timeout, auto_mpi_discovery=False)
        acc_kwargs: dict[str, Any] = dict(
            gradient_accumulation_steps=self.s.training.gradient_accumulation_steps,
            # fills a bf16/fp16 "auto" in deepspeed.json; concrete values there win
            mixed_precision=self.s.training.mixed_precision if self.is_ds else None,
            step_scheduler_with_optimizer=False,  # one scheduler step per optimizer step, stepped below
            dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=self.s.training.seed),
            kwargs_handlers=[InitProcessGroupKwargs(timeout=timeout)],
            **tracking.accelerator_kwargs(self.s, self.out, self.arts.base_dir),  # [logging] log_with
        )
        self.acc = Accelerator(**acc_kwargs)
        self.shim_changes = cpu_shim.correct_state(self.acc, self.strategy, plan_type=self.arts.plan.distributed_type)
        if self.is_ds and cpu_shim.needed(self.acc):
            self.acc.native_amp = False  # DeepSpeed's JSON decides precision, as on GPUs
        set_seed(self.s.training.seed)
        self.main = self.acc.is_main_process
        self.rank = self.acc.process_index
        self.world = self.acc.num_processes
        self.trackers = tracking.start(self.acc, self.s, self.out, self.arts.base_dir)
        if self.strategy is Strategy.FSDP1:
            warnings.warn("FSDP v1 is deprecated; use fsdp.version = 2", DeprecationWarning, stacklevel=1)
            self.say("warning: FSDP v1 is deprecated; FSDP2 (fsdp.version = 2) shards per parameter and supports LoRA")

    def say(self, text: str) -> None:
        if self.main:
            print(text, flush=True)

    def build(self) -> None:
        s = self.s
        fam_cls = get_family(s.model.family)
        self.fam = fam_cls(FamilyContext(settings=s, base_dir=self.arts.base_dir, seed=s.training.seed,
                                         rank=self.rank, world_size=self.world))
        model = self.fam.build_model()
        model = self.fam.prepare_model(model)
        self.dtype_notes = self._check_dtypes(model)
        if self.acc.distributed_type.name == "FSDP" and not self.s.fsdp.transformer_layer_cls_to_wrap:
            plugin = self.acc.state.fsdp_plugin
            classes = self.fam.wrap_classes(model)
            if plugin.auto_wrap_policy is not None and classes and not plugin.transformer_cls_names_to_wrap:
                plugin.transformer_cls_names_to_wrap = classes
        self.model = model
        self.data = rank_data(self.fam, self.world)  # file -> batch: runtime/data_sources/driver.py
        self.train_ds, self.val_ds = self.data.train, self.data.val
        self.optimizer, self.scheduler = self._optimizer_and_scheduler(model)

    def _check_dtypes(self, model) -> list[str]:
        dtypes: dict[str, int] = {}
        for p in model.parameters():
            dtypes[str(p.dtype).replace("torch.", "")] = dtypes.get(str(p.dtype).replace("torch.", ""), 0) + p.numel()
        notes = ["parameter dtypes: " + ", ".join(f"{k} ({v:,})" for k, v in sorted(dtypes.items()))]
        if len(dtypes) > 1 and self.strategy is Strategy.FSDP1:
            model.to(torch.float32)
            notes.append("FSDP v1 needs one dtype per flat parameter: all parameters cast to float32")
        return notes

    def _optimizer_and_scheduler(self, model):
        t = self.s.training
        streamed = self.data.streamed  # a stream's length is unknown: max_steps
        per_epoch = (t.max_steps or 1) if streamed else self._batches_per_rank() // t.gradient_accumulation_steps
        if per_epoch < 1:
            raise RunError(f"the training data gives {self._batches_per_rank()} micro-batches per rank, fewer than "
                           f"gradient_accumulation_steps = {t.gradient_accumulation_steps}; add data or lower the batch")
        self.steps_per_epoch = per_epoch
        self.total_steps = t.max_steps if t.max_steps > 0 else per_epoch * t.num_epochs
        if self.max_steps_override is not None:
            self.total_steps = self.max_steps_override
        ds_cfg = self.arts.deepspeed_config() if self.is_ds else {}
        block = offload_optimizer_block(ds_cfg, t) if self.is_ds else None
        if block:  # ZeRO-Offload: DeepSpeed builds its CPU Adam (the artefact itself names none)
            self.acc.state.deepspeed_plugin.deepspeed_config["optimizer"] = block
            ds_cfg = {**ds_cfg, "optimizer": block}
        return optimizer_and_scheduler(list(self.fam.trainable_parameters(model)), t, ds_cfg, self.total_steps,
                                       self.world)

    def _batches_per_rank(self) -> int:
        sampler = self.data.batch_sampler(self.train_ds, self.s.training, self.world, True)  # diffusion: buckets
        n = len(sampler) if sampler is not None else len(self.train_ds) // self.s.training.micro_batch_size
        return n // self.world

    def _loader(self, ds, shuffle: bool):
        from torch.utils.data import DataLoader

        kw: dict[str, Any] = {"batch_sampler": self.data.batch_sampler(ds, self.s.training, self.world, shuffle)}
        if kw["batch_sampler"] is None:
            kw = dict(batch_size=self.s.training.micro_batch_size, shuffle=shuffle, drop_last=shuffle)
        return DataLoader(ds, collate_fn=self.data.collate, num_workers=self.s.data.num_workers, **kw)

    def prepare(self) -> None:
        if self.data.streamed:  # each rank reads its own part (data_sources/stream.py)
            from .data_sources.stream import StreamLoader

            self.model, self.optimizer, self.scheduler = self.acc.prepare(self.model, self.optimizer, self.scheduler)
            self.train_loader = StreamLoader(self.train_ds, self.s.training.micro_batch_size, self.data.collate,
                                             self.acc.device)
        else:
            train_loader = self._loader(self.train_ds, shuffle=True)
            self.model, self.optimizer, self.train_loader, self.scheduler = self.acc.prepare(
                self.model, self.optimizer, train_loader, self.scheduler)
        self.val_loader = self.acc.prepare(self._loader(self.val_ds, shuffle=False)) if self.val_ds else None
        self.fam.on_prepared(self.model, self.acc)

    def summarise(self) -> None:
        unwrapped = self.acc.unwrap_model(self.model)
        total = trainable = local = 0
        for p in unwrapped.parameters():
            n = getattr(p, "ds_numel", None) or p.numel()
            total += n
            trainable += n if p.requires_grad else 0
            lp = getattr(p, "ds_tensor", None)
            local += lp.numel() if lp is not None else (p.to_local().numel() if hasattr(p, "to_local") else p.numel())
        held = rank_state_bytes(self.model, self.optimizer)
        counts = torch.tensor([local, held["params"]], dtype=torch.float64, device=self.acc.device)
        gathered = self.acc.gather(counts.unsqueeze(0)).cpu().tolist()
        self.param_counts = {"total": total, "trainable": trainable, "local": local}
        self.say(f"tuner run: {self.strategy} on {self.world} rank(s) ({self.acc.distributed_type.name}, "
                 f"{self.acc.device.type}); model {self.fam.describe()}")
        self.say(f"parameters: {total:,} total, {trainable:,} trainable")
        for note in self.dtype_notes:
            self.say(note)
        for r, (n, b) in enumerate(gathered):
            self.say(f"rank {r} holds {int(n):,} parameter elements ({b / 2**20:.2f} MiB)")
        if self.shim_changes:
            self.say("cpu shim: " + "; ".join(self.shim_changes))
        if self.trackers:
            self.say(f"trackers: {', '.join(self.trackers)} (files in "
                     f"{tracking.logging_dir(self.s, self.out, self.arts.base_dir)})")

    # -- resume -------------------------------------------------------------------------
    def maybe_resume(self) -> None:
        self.step, self.epoch, self.batches_in_epoch, self.tokens_seen = 0, 0, 0, 0
        if self.main:
            ckpt.remove_partial(self.ckdir)
        # What to resume, its compatibility and the data position were decided before any rank
        # started (runtime/run_plan.py). Each rank's own view of the folder is compared here:
        # every rank the same checkpoint, or none trains (runtime/resume_agree.py).
        r = self.plan.resume
        path = resume_agree.agreed(lambda: self._planned_checkpoint(), self.ckdir) if r.asked else None
        if path is None:
            if r.asked:
                self.say(f"no checkpoint to resume in {self.ckdir}; starting fresh")
            return
        meta = ckpt.read_meta(path)
        if not r.step_checked:  # a run by epochs: its last step is known only now, with the data read
            ckpt.check_step(meta, self.total_steps, path)
        try:  # a garbled state file: one message naming the last intact checkpoint, not a traceback
            kept = "; ".join(x for x in (r.kept, portable_state.load_state(self, path, meta)) if x)
        except ckpt.read_errors() as exc:
            raise ckpt.unreadable(path, exc) from None
        self.step, self.epoch, self.tokens_seen = meta.step, meta.epoch, meta.tokens_seen
        self.batches_in_epoch, short = r.skip, r.short
        self.say(f"resumed from {path} at step {self.step} (epoch {self.epoch}, batch {self.batches_in_epoch})")
        if kept:
            self.say(f"resume: {kept}")
        if short:
            self.say(f"resume: the data position ({r.position} samples into epoch {self.epoch}) is not a whole "
                     f"number of rounds of {r.round}; {short} samples are trained again")

    def _planned_checkpoint(self) -> Path | None:
        """The plan's checkpoint, as this rank sees it (still there and complete), or None."""
        if not self.plan.resume.checkpoint:
            return None
        path = Path(self.plan.resume.checkpoint)
        ckpt.read_meta(path)
        return path

    def _state_dict_type(self) -> ckpt.HeldState:
        return ckpt.state_dict_kind(self.strategy, self.s.checkpoint.state_dict_type)

    # -- the loop -----------------------------------------------------------------------
    def loop(self) -> None:
        t = self.s.training
        track = (lambda values, step: self.acc.log(values, step=step)) if self.trackers else None
        rep = self.reporter = Reporter(self.out, self.total_steps, self.step, self.fam.unit, main=self.main,
                                       track=track)
        self.losses: list[float] = []
        self.model.train()
        accum = t.gradient_accumulation_steps
        # The loss is summed on the device and read (one host sync) only on logging steps.
        step_loss, step_units, t_step = self._zero_loss(), 0, time.perf_counter()
        # Whole global batches only: an epoch's tail shorter than one (micro x accumulation x
        # ranks) is not trained, so an epoch is the same samples at every world size.
        limit = None if self.data.streamed else self.steps_per_epoch * accum
        while self.step < self.total_steps:
            self.train_loader.set_epoch(self.epoch)
            loader = self.train_loader
            if self.batches_in_epoch and not self.data.streamed:  # a stream resumes itself
                loader = self.acc.skip_first_batches(self.train_loader, self.batches_in_epoch)
                loader.set_epoch(self.epoch)
            for batch in loader:
                if limit is not None and self.batches_in_epoch >= limit:
                    continue  # the tail: read through, so accelerate sees the epoch end
                self.callbacks.fire("on_batch_start", self, batch)
                with self.acc.accumulate(self.model):
                    loss = self.fam.loss(self.model, batch)
                    self.acc.backward(loss)
                    if self.acc.sync_gradients and t.max_grad_norm > 0 and not self.is_ds:
                        if t.clip_method == "value":  # each gradient value (SimpleTuner's default method)
                            self.acc.clip_grad_value_(self.model.parameters(), t.max_grad_norm)
                        else:
                            self.acc.clip_grad_norm_(self.model.parameters(), t.max_grad_norm)
                    self.optimizer.step()
                    if self.acc.sync_gradients:
                        self.scheduler.step()
                    self.optimizer.zero_grad(set_to_none=True)
                self.batches_in_epoch += 1
                step_loss += loss.detach().float() / accum
                step_units += self.fam.batch_units(batch)
                if not self.acc.sync_gradients:
                    continue
                self.step += 1
                self.fam.on_optimizer_step(self.model, self.step)
                self.tokens_seen += step_units * self.world
                metrics = None
                if t.log_every and (self.step % t.log_every == 0 or self.step == self.total_steps):
                    mean = float(self.acc.reduce(step_loss.reshape(1), "mean")[0])
                    if mean != mean or mean in (float("inf"), float("-inf")):  # every rank sees it: all stop
                        self._non_finite(step_loss, mean)
                    dt = time.perf_counter() - t_step
                    metrics = {"loss": mean, "lr": self._lr(), "epoch": self.epoch,
                               "throughput": step_units * self.world / max(dt, 1e-9), "tokens_seen": self.tokens_seen}
                    metrics.update(self.fam.step_metrics())  # tokens per step, padding ratio
                    self.losses.append(mean)
                rep.step(self.step, metrics)
                self.callbacks.fire("on_step_end", self, metrics)
                step_loss, step_units = self._zero_loss(), 0
                if t.validation_every and self.step % t.validation_every == 0:
                    self.validate()
                if self.s.checkpoint.every_steps and self.step % self.s.checkpoint.every_steps == 0:
                    self.save_checkpoint()
                t_step = time.perf_counter()
                if self.step >= self.total_steps:
                    break
            else:
                self.epoch += 1
                self.batches_in_epoch = 0
                every, steps = self.s.checkpoint.every_epochs, self.s.checkpoint.every_steps
                if every and self.epoch % every == 0 and not (steps and self.step % steps == 0):
                    self.save_checkpoint()  # at the epoch's end (unless every_steps just saved this step)

    def _non_finite(self, step_loss: torch.Tensor, mean: float) -> None:
        losses = [float(x) for x in self.acc.gather(step_loss.detach().float().reshape(1))]
        bad = [r for r, x in enumerate(losses) if x != x or x in (float("inf"), float("-inf"))]
        last = ckpt.latest_checkpoint(self.ckdir)
        raise RunError(f"the loss is {mean} at step {self.step}, from rank{'s' if len(bad) > 1 else ''} "
                       f"{', '.join(map(str, bad)) or '?'} (host {os.uname().nodename}); every rank stopped. "
                       f"Last complete checkpoint: {last or 'none'}; lower training.learning_rate or check that "
                       "rank's data, then resume with --resume latest")

    def _zero_loss(self) -> torch.Tensor:
        return torch.zeros((), dtype=torch.float32, device=self.acc.device)

    def _lr(self) -> float:
        try:
            return float(self.scheduler.get_last_lr()[0])
        except Exception:
            return float(self.optimizer.param_groups[0]["lr"]) if self.optimizer.param_groups else 0.0

    def validate(self) -> dict[str, float]:
        if self.val_loader is None:
            return {}
        self.fam.ctx.extra.update(step=self.step, output_dir=str(self.out))
        rank_guard.doing(f"validation at step {self.step}")  # for the launcher's hang watch
        self.model.eval()
        metrics = self.fam.evaluate(self.model, self.val_loader, self.acc)
        self.model.train()
        self.reporter.log(self.step, metrics)
        self.reporter.message(f"step {self.step}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
        return metrics

    # -- checkpoints --------------------------------------------------------------------
    def save_checkpoint(self) -> Path:
        rank_guard.doing(f"saving checkpoint step-{self.step}")  # for the launcher's hang watch
        tmp = ckpt.tmp_dir_for(self.ckdir, self.step)
        if self.main:
            self.ckdir.mkdir(parents=True, exist_ok=True)
        self.acc.wait_for_everyone()
        with full_disk_named(tmp), quick_save():
            self.acc.save_state(str(tmp))
            self.callbacks.fire("on_save", self, tmp)
            self.fam.save_state(tmp, self.acc)
        self.acc.wait_for_everyone()  # every rank has written its part
        final, t = self.ckdir / ckpt.step_dir_name(self.step), self.s.training
        if self.main:
            meta = ckpt.CheckpointMeta(step=self.step, strategy=self.strategy, state_dict_type=self._state_dict_type(),
                                       world_size=self.world, epoch=self.epoch, batches_in_epoch=self.batches_in_epoch,
                                       tokens_seen=self.tokens_seen, micro_batch_size=t.micro_batch_size,
                                       gradient_accumulation_steps=t.gradient_accumulation_steps, family=self.s.model.family,
                                       manifest={**self.arts.manifest, "project_dir": str(self.arts.base_dir)})
            final = ckpt.publish(self.ckdir, tmp, meta)
            ckpt.prune(self.ckdir, self.s.checkpoint.keep_last)
            self.reporter.message(f"checkpoint saved: {final}")
        self.acc.wait_for_everyone()
        return final

    # -- the end ------------------------------------------------------------------------
    def finish(self) -> None:
        t = self.s.training
        self.callbacks.fire("on_train_end", self)  # before any forward pass below
        if self.val_loader is not None and (not t.validation_every or self.step % t.validation_every):
            self.validate()
        self.fam.on_train_end(self.model, self.acc)
        if self.s.checkpoint.export:
            self.export(self.out / "final")
        self.reporter.close()
        self.acc.wait_for_everyone()
        self.acc.end_training()
        self.say(f"done: {self.step} steps; outputs in {self.out}")

    def export(self, out_dir: Path) -> None:
        state = self.acc.get_state_dict(self.model)
        if self.main:  # the rules of `tuner checkpoint export`: a file of the person's in final/ is kept
            from .export import export_model_dir

            with full_disk_named(out_dir):
                export_model_dir(lambda target: self.fam.export(state, target), out_dir, f"run {self.out}")
            print(f"exported full model: {out_dir}", flush=True)
        self.acc.wait_for_everyone()
