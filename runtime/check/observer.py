"""The rehearsal's observer, inside every rank (`tuner check`), with no change to the script.

`rehearsal()` is a no-op unless ``$TUNER_CHECK_DIR`` is set (by `tuner check`); then the
bootstrap (a person's script) and the worker (tuner's trainer) run inside it, and it:

* wraps ``Accelerator.__init__`` (one record per Accelerator: rank, world size,
  distributed type, precision as accelerate sees them, and `PartialState`'s view),
  ``Accelerator.prepare`` (what went through it; how the prepared model's parameters are
  held; a forward pre-hook that fingerprints the first batches and notes autocast) and
  ``Accelerator.backward`` (the loss; gradients left over from the previous step);
* registers torch's global optimizer-step hooks (every optimizer, prepared or not):
  gradients on the optimizer's parameters before the step, the learning rate, and whether
  the parameters changed after it;
* stops the script after ``$TUNER_CHECK_STEPS`` optimizer steps (a private `RehearsalDone`,
  a BaseException, so ``except Exception`` in a script does not swallow it) and writes
  ``rank-<RANK>.json`` into ``$TUNER_CHECK_DIR`` for the launcher's `analyse`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from . import collectives, losses, samples, saves, tensors
from .tensors import checksum, fingerprint, local, model_facts

if TYPE_CHECKING:
    from ..artefacts import Artefacts

DIR_ENV, STEPS_ENV = "TUNER_CHECK_DIR", "TUNER_CHECK_STEPS"
BATCHES = 3  # fingerprinted forward calls per run


class RehearsalDone(BaseException):
    """Raised after the rehearsal's last optimizer step; ends the script on every rank."""


_runs: list[dict[str, Any]] = []
_models: dict[int, Any] = {}  # run index -> prepared model
_accelerators: dict[int, Any] = {}  # run index -> its Accelerator
_installed = False
_depth: list[int] = []
_stuck: dict[str, Any] = {}  # where this rank waited in a collective that timed out (collectives.stuck)


def _safe(fn):
    """An observer that fails must not fail the script: note the error, go on."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RehearsalDone:
            raise
        except Exception as exc:  # noqa: BLE001 - reported in the rank's facts, never raised
            _errors.append(f"{fn.__name__}: {type(exc).__name__}: {exc}"[:300])
            return None
    return wrapper


_errors: list[str] = []
_marks: dict[str, float] = {}  # phase -> wall-clock time (time.time()) on this rank: where the rehearsal's time goes


def _mark(name: str, first: bool = True) -> None:
    if not first or name not in _marks:
        _marks[name] = time.time()
_launch_env: dict[str, str] = {}  # RANK / WORLD_SIZE as the launcher set them (a script may change them)


def active() -> bool:
    return bool(os.environ.get(DIR_ENV))


@contextlib.contextmanager
def rehearsal():
    """Run the body (the script, or tuner's trainer) under the observer when checking."""
    if not active():
        yield
        return
    install()
    collectives.bound()
    _mark("observer")
    _launch_env.update(rank=os.environ.get("RANK", "0"), world=os.environ.get("WORLD_SIZE", "1"))
    error = None
    try:
        yield
    except RehearsalDone:
        pass
    except SystemExit as exc:
        if exc.code not in (0, None):
            error = f"exit status {exc.code}"
        raise
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        _stuck.update(collectives.stuck(exc) or {})
        raise
    finally:
        write(error)


def redirect_output(arts: Artefacts) -> Artefacts:
    """tuner's trainer in a rehearsal writes its metrics under the check's temporary
    directory, not into the run's output directory: the build with that output directory
    (the settings are frozen; `arts` is not changed)."""
    if not active():
        return arts
    output = replace(arts.settings.output, dir=os.path.join(os.environ[DIR_ENV], "output"))
    return replace(arts, settings=replace(arts.settings, output=output))


def _run() -> dict[str, Any]:
    if not _runs:
        _runs.append(_new_run(None))
    return _runs[-1]


def _new_run(acc) -> dict[str, Any]:
    return {"accelerator": None, "partial_state": None, "prepared": {"models": 0, "optimizers": 0, "dataloaders": 0,
            "schedulers": 0}, "model": None, "batches": [], "batch_sizes": [], "autocast": [], "losses": [],
            "backwards": 0, "steps": 0, "grads": [], "stale_grads": 0, "lr": [], "changed": None,
            "optimizer": None, "ds": None, "state_bytes": None, "frozen_in_optimizer": 0}


@_safe
def _view(run, acc) -> None:
    from accelerate.state import PartialState

    run["accelerator"] = {**_state_view(acc), "mixed_precision": str(acc.mixed_precision),
                          "accumulation": int(acc.gradient_accumulation_steps)}
    run["partial_state"] = _state_view(PartialState())


def _state_view(obj) -> dict[str, Any]:
    return {"process_index": int(obj.process_index), "num_processes": int(obj.num_processes),
            "distributed_type": getattr(obj.distributed_type, "name", str(obj.distributed_type))}


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    import torch
    from accelerate import Accelerator

    init, backward = Accelerator.__init__, Accelerator.backward

    def __init__(self, *args, **kwargs):
        _mark("accelerator")
        init(self, *args, **kwargs)
        saves.watch_diffusers_ema(_safe)
        losses.watch(_run, _safe)
        run = _new_run(self)
        _runs.append(run)
        _accelerators[len(_runs) - 1] = self
        _view(run, self)

    def wrap(original):
        def prepare_(self, *args, **kwargs):
            if _depth:  # prepare() calls prepare_model() ...: note the outermost call only
                return original(self, *args, **kwargs)
            run = _run()
            _view(run, self)  # again: tuner's trainer corrects the CPU state after the constructor
            before = [a for a in args if isinstance(a, torch.nn.Module)]
            if before and run["model"] is None:
                run["dtypes"] = sorted({str(p.dtype).replace("torch.", "") for p in before[0].parameters()})
            if before:
                _mark("prepare")
            _depth.append(1)
            try:
                result = original(self, *args, **kwargs)
            finally:
                _depth.pop()
            if before:
                _mark("prepared", first=False)
            items = tuple(result) if isinstance(result, (tuple, list)) else (result,)
            _note_prepared(run, items, self)
            return result
        return prepare_

    def backward_(self, loss, **kwargs):
        run = _run()
        run["backwards"] += 1
        try:
            run["losses"].append(float(loss.detach().float().mean().item()))
        except Exception:  # noqa: BLE001 - a loss that is not a tensor: nothing to read
            pass
        model = _models.get(len(_runs) - 1)
        if (model is not None and run["steps"] and run["backwards"] == run["steps"] + 1
                and run["ds"] is None and int(self.gradient_accumulation_steps) == 1 and _left_over(model)):
            run["stale_grads"] += 1
        out = backward(self, loss, **kwargs)
        engine = getattr(self, "deepspeed_engine_wrapped", None)
        if engine is not None:
            _after_ds_step(run, engine.engine)
        return out

    load_state = Accelerator.load_state

    def load_state_(self, *args, **kwargs):
        out = load_state(self, *args, **kwargs)
        _safe(samples.resumed)(_run(), self)
        return out

    Accelerator.load_state = load_state_
    Accelerator.__init__, Accelerator.backward = __init__, backward_
    for name in ("prepare", "prepare_model", "prepare_optimizer", "prepare_data_loader", "prepare_scheduler"):
        setattr(Accelerator, name, wrap(getattr(Accelerator, name)))
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(_pre_step)
    register_optimizer_step_post_hook(_post_step)
    samples.install(_run, _safe)
    saves.install(_run, _safe)


@_safe
def _left_over(model) -> bool:
    """Gradients still there at the first backward after a step: nobody zeroed them."""
    for p in model.parameters():
        g = getattr(p, "grad", None)
        if g is not None and bool(local(g).abs().sum() > 0):
            return True
    return False


@_safe
def _note_prepared(run, items, acc) -> None:
    import torch

    for obj in items:
        name = type(obj).__name__
        if isinstance(obj, torch.nn.Module):
            run["prepared"]["models"] += 1
            run["model"] = model_facts(obj)
            _models[len(_runs) - 1] = obj
            obj.register_forward_pre_hook(_forward_hook(run), with_kwargs=True)
            leaf = next((x for x in obj.modules()
                         if not list(x.children()) and next(x.parameters(recurse=False), None) is not None), None)
            if leaf is not None:  # inside the forward: where accelerate's autocast is active
                leaf.register_forward_pre_hook(_autocast_hook(run))
            if name == "DeepSpeedEngine":
                run["ds"] = {"stage": int(obj.zero_optimization_stage()),
                             "micro": int(obj.train_micro_batch_size_per_gpu()),
                             "accumulation": int(obj.gradient_accumulation_steps()),
                             "train_batch": int(obj.train_batch_size()), "world": int(obj.dp_world_size),
                             "bf16": bool(obj.bfloat16_enabled()), "fp16": bool(obj.fp16_enabled()),
                             "partition": sum(int(t.numel()) for t in
                                              getattr(obj.optimizer, "single_partition_of_fp32_groups", []) or [])}
        elif isinstance(obj, torch.optim.Optimizer) or hasattr(obj, "param_groups"):
            run["prepared"]["optimizers"] += 1
        elif "DataLoader" in name or isinstance(obj, torch.utils.data.DataLoader):
            run["prepared"]["dataloaders"] += 1
        elif "Scheduler" in name or hasattr(obj, "get_last_lr"):
            run["prepared"]["schedulers"] += 1


def _forward_hook(run):
    @_safe
    def hook(module, args, kwargs):
        samples.feeding(module)
        if len(run["batches"]) < BATCHES:
            samples.packing(run, kwargs)
            fp = fingerprint([args, kwargs])
            if fp is not None:
                run["batches"].append(fp[0])
                run["batch_sizes"].append(fp[1])
        return None
    return hook


def _autocast_hook(run):
    @_safe
    def hook(module, args):
        import torch

        if len(run["autocast"]) < BATCHES:
            run["autocast"].append(bool(torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")))
    return hook


_before: dict[int, list[float]] = {}


@_safe
def _pre_step(opt, args, kwargs) -> None:
    run = _run()
    limit = int(os.environ.get(STEPS_ENV, "0") or 0)
    if limit and run["steps"] >= limit:  # the rehearsal's steps are done: end the script here
        raise RehearsalDone()
    params = tensors.params(opt)
    grads = [local(p.grad) for p in params if getattr(p, "grad", None) is not None]
    finite = all(bool(g.isfinite().all()) for g in grads)
    nonzero = any(bool(g.abs().sum() > 0) for g in grads)
    run["grads"].append({"with_grad": len(grads), "params": len(params), "finite": finite, "nonzero": nonzero})
    model = _models.get(len(_runs) - 1)
    if run["optimizer"] is None:
        ids = {id(p) for p in params}
        info: dict[str, Any] = {"params": len(params), "type": type(opt).__name__}
        # A torch LR scheduler writes its base lr into the groups: the script's schedule starts there.
        initial = [float(g["initial_lr"]) for g in opt.param_groups if "initial_lr" in g]
        if initial:
            info["initial_lr"] = max(initial)
        if model is not None and run["ds"] is None:
            trainable = [p for p in model.parameters() if p.requires_grad]
            info["trainable_in_model"] = len(trainable)
            info["trainable_held"] = sum(id(p) in ids for p in trainable)
            model_ids = {id(p) for p in model.parameters()}
            info["foreign"] = sum(id(p) not in model_ids for p in params)
            info["frozen_held"] = sum(1 for p in params if not p.requires_grad)
        run["optimizer"] = info
    if not run["changed"]:  # until a step is seen to move the parameters
        _before[id(opt)] = checksum(params)


@_safe
def _post_step(opt, args, kwargs) -> None:
    run = _run()
    run["steps"] += 1
    _mark("step 1" if run["steps"] == 1 else "last step", first=False)
    run["lr"].append(max((float(g.get("lr", 0.0)) for g in opt.param_groups), default=0.0))
    if not run["changed"] and id(opt) in _before:
        moved = checksum(tensors.params(opt)) != _before.pop(id(opt))
        # A step at lr 0 (the first step of a warmup) moves nothing: it proves nothing either.
        if moved or run["lr"][-1] > 0:
            run["changed"] = moved
    if run["steps"] == 1 and run["state_bytes"] is None:
        model = _models.get(len(_runs) - 1)
        if model is not None:
            from ..memory import rank_state_bytes

            with contextlib.suppress(Exception):
                run["state_bytes"] = rank_state_bytes(model, opt)
    limit = int(os.environ.get(STEPS_ENV, "0") or 0)
    accumulation = int((run["accelerator"] or {}).get("accumulation", 1))
    if limit and run["steps"] >= limit and run["backwards"] >= accumulation:
        # Done: end here rather than at the next step's first micro-batch (one forward and
        # backward fewer per rank). With fewer backward passes than the accumulation, go on to
        # the next step, so that a loop without accumulate() shows (optimizer-step).
        raise RehearsalDone()


@_safe
def _after_ds_step(run, engine) -> None:
    norm = engine.get_global_grad_norm() if hasattr(engine, "get_global_grad_norm") else None
    if norm is not None:
        v = float(norm)
        run.setdefault("ds_grad_norms", []).append(v if math.isfinite(v) else str(v))
    if run["state_bytes"] is None and run["steps"]:
        from ..memory import rank_state_bytes

        with contextlib.suppress(Exception):
            run["state_bytes"] = rank_state_bytes(engine, None)


def _process_start() -> float | None:
    try:
        import psutil  # accelerate's dependency

        return float(psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - the timing is a nicety
        return None


def write(error: str | None = None) -> None:
    d = os.environ.get(DIR_ENV)
    if not d:
        return
    rank = _launch_env.get("rank") or os.environ.get("RANK", "0")
    _mark("write")
    data = {"rank": int(rank), "marks": {"process": _process_start(), **_marks},
            "env_world": int(_launch_env.get("world") or os.environ.get("WORLD_SIZE", "1")),
            "runs": [r for r in _runs if r["accelerator"] is not None or r["backwards"] or r["steps"]],
            "error": error, "observer_errors": _errors, "collective": _stuck or None}
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".rank-{rank}.json")
    with open(tmp, "w") as fh:
        json.dump(data, fh, default=str)
    os.replace(tmp, os.path.join(d, f"rank-{rank}.json"))
