"""The run plan: everything `tuner run`, `tuner launch` and `tuner check` decide before any rank
starts, decided once, by `make_plan`, from the compiled build and the command's options.

In order (the first refusal ends the plan; nothing is started):

1. which family trains (`tuner run`: a family or feature tuner's trainer does not implement is
   refused naming the trainer that does) and the package the optimizer needs;
2. the packages the build needs (runtime/extras.py), the environment knobs (runtime/knobs.py),
   DeepSpeed's op cache (a stale build lock would hang every rank: runtime/op_cache.py);
3. this machine's place in the job (`Topology`) and, on machine 0 of several, the rendezvous port;
4. `tuner run` only, holding the output directory's lock (taken here, held until the caller's
   ``with`` ends, i.e. while the ranks run): the output-directory rule (runtime/run_lock.py), the
   resume (the checkpoint chosen, its compatibility, the step, the carried global batch and data
   position, a universal conversion: runtime/resume_rules.py), the data check's result
   (runtime/data_sources/check.py), the stale NVMe swap folders to remove;
5. the launcher: accelerate's own on GPUs (its command), torch's elastic launcher on CPU gloo
   ranks (the environment accelerate derives from the compiled YAML), what every rank runs.

The command shows the plan, refuses (`RunPlan.refusal`: one line, its exit code) or carries it
out (runtime/run_execute.py, runtime/launch.py). The ranks' part (`RankPlan`) is written to
``run_plan.json`` beside the build the ranks read (`tuner run`: the run's own copy in
``OUTPUT/.tuner-build/``; `tuner check`: the check's folder) and each rank reads it
(``python -m tuner.runtime.worker BUILD --plan FILE``) instead of deciding again. What stays on
the ranks, and why:

* every rank resumes the same checkpoint, or none trains (runtime/resume_agree.py): what a rank
  finds is its own machine's view of the output folder, known only on that machine, and a save
  can complete on one machine's disk and not another's after the plan was made;
* the checkpoint's step against the run's last step when the run counts epochs: the number of
  steps is known only once the ranks have read their data;
* reading the checkpoint's state files (a garbled file is found when it is loaded).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..compiler.diagnostics import EXIT_INVALID, EXIT_RANK_FAILED
from .artefacts import Artefacts, RunError
from .launch_env import Entry, Topology

RUN, LAUNCH, CHECK = "tuner run", "tuner launch", "tuner check"
#: The ranks' part of the plan, beside the build they read.
PLAN_FILE = "run_plan.json"
WORKER = "tuner.runtime.worker"
BOOTSTRAP = "tuner.runtime.bootstrap"


@dataclass(frozen=True)
class Options:
    """What the command line asked (the plan decides what it means)."""
    command: str = RUN
    target: tuple[str, ...] = ()  # a person's script (`tuner launch`, `tuner check`); () tuner's trainer
    resume: str = ""
    max_steps: int | None = None
    callbacks: tuple[str, ...] = ()
    new_global_batch: bool = False
    machine_rank: int | None = None
    main_address: str | None = None
    main_port: int | None = None
    build_hint: str = "BUILD_DIR"  # how a message names the build (as it was given)

    @classmethod
    def of(cls, command: str, args: Any, target: list[str] | tuple[str, ...] | None = None, **more: Any) -> Options:
        """The options of a parsed command line (`argparse.Namespace`)."""
        return cls(command=command, target=tuple(target or ()), resume=getattr(args, "resume", None) or "",
                   max_steps=getattr(args, "max_steps", None), callbacks=tuple(getattr(args, "callback", None) or ()),
                   new_global_batch=bool(getattr(args, "new_global_batch", False)),
                   machine_rank=getattr(args, "machine_rank", None), main_address=getattr(args, "main_address", None),
                   main_port=getattr(args, "main_port", None), **more)


@dataclass(frozen=True)
class Refusal:
    message: str
    exit_code: int


@dataclass(frozen=True)
class Resume:
    """What the ranks resume, decided before they start."""
    asked: str = ""  # what was asked ('latest', 'auto', a path): with no checkpoint, the ranks say they start fresh
    chosen: str = ""  # the checkpoint chosen ('' none)
    checkpoint: str = ""  # what the ranks load: `chosen`, or its universal conversion
    convert: bool = False  # `chosen` is converted to `checkpoint` before any rank starts
    kept: str = ""  # what a world-size change kept, or how a new global batch was carried
    step_checked: bool = False  # the step was checked against the run's last step (not by epochs)
    skip: int = 0  # micro-batches each rank skips in the epoch
    short: int = 0  # samples of the saved position trained again (0 with the global batch kept)
    position: int = 0  # samples into the epoch
    round: int = 0  # samples per round of micro-batches (micro x ranks)


@dataclass(frozen=True)
class RankPlan:
    """The ranks' part of the plan (`PLAN_FILE`)."""
    resume: Resume = field(default_factory=Resume)
    max_steps: int | None = None
    callbacks: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RankPlan:
        d = json.loads(text)
        return cls(Resume(**d["resume"]), d["max_steps"], tuple(d["callbacks"]))


def read_rank_plan(path: str | os.PathLike) -> RankPlan:
    try:
        return RankPlan.from_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RunError(f"the run plan {path} cannot be read ({exc}); start the run with `tuner run`, which "
                       "writes it") from None


@dataclass(frozen=True)
class Launcher:
    """How this machine's ranks start, and what each runs (``python -m MODULE ARGS``)."""
    kind: str  # "accelerate" (GPUs: accelerate's launcher) or "elastic" (CPU: torch's, gloo ranks)
    entry: Entry  # what each rank runs, and the prefix of the launcher's messages
    cwd: str
    nproc: int
    accelerate: tuple[str, ...] = ()  # the launcher command on GPUs
    env: tuple[tuple[str, str], ...] = ()  # the ranks' environment on CPU (accelerate's derivation)
    note: str = ""  # a line the launcher says first


@dataclass(frozen=True)
class RunPlan:
    command: str
    family: str
    trains: bool  # tuner's own trainer (else a person's script)
    optimizer_package: str | None = None  # the package training.optimizer needs (None: torch's own)
    topology: Topology | None = None
    build_dir: str = ""  # the build the ranks read
    plan_file: str = ""  # where they read `ranks`
    ranks: RankPlan = field(default_factory=RankPlan)
    data_line: str | None = None
    nvme_clear: tuple[str, ...] = ()  # stale DeepSpeed swap roots cleared before the ranks start
    notes: tuple[str, ...] = ()  # lines shown before the ranks start
    launcher: Launcher | None = None
    refusal: Refusal | None = None


@contextlib.contextmanager
def make_plan(arts: Artefacts, opts: Options, plan_dir: Path | None = None) -> Iterator[RunPlan]:
    """The plan of `opts.command` for the build `arts`, decided once (see the module's text).

    `tuner run`'s ranks read the run's own copy of the build, ``OUTPUT/.tuner-build/``, and the
    plan beside it; otherwise they read `arts.build_dir`, and tuner's trainer the plan in
    `plan_dir` (`tuner check`'s folder). `tuner run`'s plan is made holding the output
    directory's lock, held until the ``with`` block ends."""
    from .knobs import check as check_knobs

    plan = RunPlan(opts.command, arts.settings.model.family, trains=not opts.target)
    plan = _decide(plan, lambda p: _runnable(arts, opts, p))
    plan = _decide(plan, lambda p: _knobs(check_knobs, p))
    plan = _decide(plan, lambda p: _placed(arts, opts, p))
    if plan.refusal or opts.command != RUN:
        yield _decide(plan, lambda p: _launcher(arts, opts, p, arts.build_dir, plan_dir))
        return
    from .run_build import copy_name
    from .run_lock import acquire_run_lock

    assert plan.topology is not None
    machine = plan.topology.machine_rank if plan.topology.num_machines > 1 else None
    # One run per output directory (per machine of a job of several); taking the lock also proves
    # the directory writable. The lock dies with this process (kill -9 included).
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(acquire_run_lock(arts.output_dir, machine))
        except RunError as exc:
            yield replace(plan, refusal=Refusal(exc.message, exc.exit_code))
            return
        plan = _decide(plan, lambda p: _resumed(arts, opts, p))
        copy = arts.output_dir / copy_name(machine)
        yield _decide(plan, lambda p: _launcher(arts, opts, p, copy, copy))


def _knobs(check, plan: RunPlan) -> RunPlan:
    check()  # a bad TUNER_HANG_S / _PG_TIMEOUT / _RDZV_TIMEOUT is named before any rank starts
    return plan


def _decide(plan: RunPlan, step) -> RunPlan:
    """`step(plan)`, unless the plan is refused already; a RunError becomes its refusal."""
    if plan.refusal:
        return plan
    try:
        return step(plan)
    except RunError as exc:
        return replace(plan, refusal=Refusal(exc.message, exc.exit_code))


def _runnable(arts: Artefacts, opts: Options, plan: RunPlan) -> RunPlan:
    from .extras import check_installed
    from .optim import PACKAGED

    s = arts.settings
    if opts.command == RUN:
        trainable(arts)
    package = PACKAGED[s.training.optimizer][2] if s.training.optimizer in PACKAGED and not s.deepspeed.enabled else None
    check_installed(arts, trains=plan.trains)  # a missing package is named first: before the op cache, the data
    if arts.plan.uses_deepspeed:  # a build lock left by a killed build would hang every rank, silently
        from .op_cache import refuse_stale

        refuse_stale()
    return replace(plan, optimizer_package=package)


def trainable(arts: Artefacts) -> None:
    """A build compiled for another trainer (a family or standalone context parallelism tuner's
    runtime does not implement) is refused."""
    from ..compiler.artefacts.emit import ACCELERATE_YAML
    from .families import FAMILIES
    from .optim import missing_optimizer_package
    from .run_build import SOURCE_KEY

    s = arts.settings
    if s.model.family not in FAMILIES:
        raise RunError(f"tuner run cannot train model family {s.model.family!r} (it trains {', '.join(sorted(FAMILIES))}); "
                       f"use the artefacts with your own trainer: accelerate launch --config_file "
                       f"{Path(arts.manifest.get(SOURCE_KEY) or arts.build_dir) / ACCELERATE_YAML} SCRIPT",
                       exit_code=EXIT_INVALID)
    problem = missing_optimizer_package(s.training.optimizer) if not s.deepspeed.enabled else None
    if problem:
        raise RunError(problem, exit_code=EXIT_INVALID)
    if s.model.base_precision not in ("no_change", "nf4-bnb"):
        raise RunError(f"tuner run does not load a {s.model.base_precision!r} base model (model.base_precision); "
                       "set it to 'no_change', or 'nf4-bnb' for QLoRA, or train with the trainer that does (e.g. SimpleTuner)",
                       exit_code=EXIT_INVALID)
    if s.training.optimizer_in_backward:
        raise RunError("tuner run steps the optimizer after backward, not in gradient hooks "
                       "(training.optimizer_in_backward); set it to false, or train with the trainer that does "
                       "(torchtune, SimpleTuner)", exit_code=EXIT_INVALID)
    if s.context_parallel.standalone and s.context_parallel.size > 1:
        raise RunError("tuner run does not implement standalone context parallelism (without FSDP2); "
                       "run the trainer that does (e.g. SimpleTuner) with these artefacts, or set fsdp.enabled = true, "
                       "fsdp.version = 2 and context_parallel.standalone = false", exit_code=EXIT_INVALID)


def _placed(arts: Artefacts, opts: Options, plan: RunPlan) -> RunPlan:
    from .launch_env import port_taken, port_taken_message

    topo = Topology.resolve(arts, opts.machine_rank, opts.main_address, opts.main_port)
    if topo.num_machines > 1 and topo.machine_rank == 0 and port_taken(topo.main_port):
        said = port_taken_message(opts.command, topo.main_port)
        raise RunError(said[len(opts.command) + 2:], exit_code=EXIT_RANK_FAILED)
    return replace(plan, topology=topo)


def _resumed(arts: Artefacts, opts: Options, plan: RunPlan) -> RunPlan:
    from .data_sources.check import check_run_data
    from .run_lock import check_output_dir

    # An output directory that holds a run is resumed when asked, refused otherwise.
    resume = check_output_dir(arts.output_dir, opts.resume or arts.settings.checkpoint.resume, opts.build_hint)
    decided = decide_resume(arts, resume, opts.max_steps, opts.new_global_batch)
    data_line = check_run_data(arts)  # opened and checked once, by the driver the ranks use
    return replace(plan, ranks=RankPlan(decided, opts.max_steps, opts.callbacks), data_line=data_line,
                   nvme_clear=nvme_roots(arts))


def decide_resume(arts: Artefacts, resume: str, max_steps: int | None = None,
                  new_global_batch: bool = False) -> Resume:
    """The resume policy, applied once: refuse a missing or incompatible checkpoint (another
    strategy tuner cannot carry, a world size that cannot keep the global batch), or one past
    the run's last step; decide the data position and whether a ZeRO checkpoint written by
    another world size is converted to DeepSpeed's universal checkpoint first."""
    from . import checkpoint as ckpt
    from . import checkpoint_convert as convert
    from .resume_rules import Layout, batches_to_skip, check_compatible, position_samples

    asked = resume or arts.settings.checkpoint.resume
    path = ckpt.resolve_resume(resume, arts.output_dir) if resume else None
    if path is None:
        return Resume(asked=asked)
    path = Path(os.path.abspath(path))  # given relative to the caller's working directory
    kind = ckpt.state_dict_kind(arts.strategy, arts.settings.checkpoint.state_dict_type)
    meta = ckpt.read_meta(path)
    t = arts.settings.training
    now = Layout.of(t, arts.plan.world_size)
    kept = check_compatible(meta, arts.strategy, kind, now, path, new_global_batch)
    last = max_steps if max_steps is not None else t.max_steps
    if last > 0:  # 0: by epochs, known on the ranks once the data is read
        ckpt.check_step(meta, last, path)
    load, universal = path, convert.needs_universal(meta, arts.strategy, now.world)
    if universal:
        load = convert.universal_dir(arts.output_dir, meta)
    skip, short = batches_to_skip(meta, now)
    return Resume(asked=asked, chosen=str(path), checkpoint=str(load), convert=universal, kept=kept,
                  step_checked=last > 0, skip=skip, short=short, position=position_samples(meta),
                  round=now.micro * now.world)


def nvme_roots(arts: Artefacts) -> tuple[str, ...]:
    """The NVMe paths of a DeepSpeed run, whose stale swap folders are removed before it starts."""
    if not arts.plan.uses_deepspeed:
        return ()
    ds = arts.deepspeed_config().get("zero_optimization", {})
    return tuple(sorted({p for k in ("offload_param", "offload_optimizer") if (p := (ds.get(k) or {}).get("nvme_path"))}))


def _launcher(arts: Artefacts, opts: Options, plan: RunPlan, build: Path, plan_dir: Path | None) -> RunPlan:
    from .launch_env import accelerate_env, config_flags, rank_threads, trainer_save_note, use_gpu_launcher

    notes = plan.notes
    plan_file = Path(plan_dir or build) / PLAN_FILE
    if plan.trains:
        args: tuple[str, ...] = (str(build.resolve()), "--plan", str(plan_file))
        command, module, gpu_argv = RUN, WORKER, None
        checkpoints, cwd = True, arts.base_dir
    else:
        target = list(opts.target)
        command, module, args, checkpoints, cwd = LAUNCH, BOOTSTRAP, (str(arts.build_dir), *target), False, Path.cwd()
        gpu_argv = tuple(["--module", *target[1:]] if target[0] == "-m" else target)
        note = trainer_save_note(arts, target) if opts.command == LAUNCH else None
        notes += (f"tuner launch: {note}",) if note else ()
    # tuner's own trainer runs in the project directory (where the settings file is): the settings'
    # relative paths (output, NVMe swap) resolve against it, from any working directory. A person's
    # script keeps the caller's working directory, as with `accelerate launch`.
    nproc = max(1, int(arts.plan.processes_per_machine))
    topo = plan.topology
    assert topo is not None
    entry = Entry(command, module, args, gpu_argv, checkpoints)
    flags = [_moved(f, arts.build_dir, build) for f in config_flags(arts)]
    if use_gpu_launcher(arts):
        import sys

        cmd = (sys.executable, "-m", "accelerate.commands.launch", *flags, *topo.accelerate_flags(),
               *(gpu_argv if gpu_argv is not None else ("--module", module, *args)))
        launcher = Launcher("accelerate", entry, str(cwd), nproc, accelerate=cmd)
    else:
        from .cpu_shim import accelerate_version, check_accelerate_version

        # The ranks' CPU layer writes accelerate's private state: an untested accelerate is refused
        # here, once (each rank checks again).
        untested = not check_accelerate_version(accelerate_version())
        note = (f"{command}: the artefacts target {arts.plan.platform} but no GPU is visible; running on CPU gloo "
                f"ranks instead" if arts.plan.platform not in ("cpu", "auto") else "")
        if untested:
            note = "\n".join(x for x in (note, f"{command}: warning: accelerate {accelerate_version()} is not a "
                                         f"tested version (TUNER_ALLOW_UNTESTED is set)") if x)
        env = {k: _moved(v, arts.build_dir, build) for k, v in accelerate_env(arts, topo, check_port=False).items()}
        env.update(rank_threads(nproc))
        launcher = Launcher("elastic", entry, str(cwd), nproc, env=tuple(sorted(env.items())), note=note)
    return replace(plan, build_dir=str(build), plan_file=str(plan_file) if plan.trains else "", notes=notes,
                   launcher=launcher)


def _moved(value: str, staged: Path, build: Path) -> str:
    """A path into the build the plan was made from (`tuner run`: its staged copy), as a path
    into the build the ranks read (the same bytes: the run's own copy)."""
    return str(build) + value[len(str(staged)):] if value.startswith(str(staged)) and staged != build else value
