"""`tuner run TARGET`: train from a build directory (or a settings file, compiled first).

The runtime reads only the compiled artefacts (manifest.json, accelerate.yaml,
deepspeed.json). Given a settings file, this command compiles it (with any ``--set``
overrides) into ``build/`` beside it first, exactly as `tuner compile` would.

The ranks never read ``build/`` itself (another run from the same folder may replace it
while they start): they read the run's own copy, written into the output directory once
the run holds its lock (runtime/run_build.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..compiler.diagnostics import EXIT_INVALID, EXIT_USAGE
from .compile_first import compile_settings

if TYPE_CHECKING:
    from ..runtime.artefacts import Artefacts


def run(args) -> int:
    target: Path = args.target
    overrides = list(getattr(args, "overrides", []) or [])
    if target.is_file():
        compiled: dict[str, str] = {}  # the run keeps what it compiled: build/ may be another run's by then
        built = compile_settings(target, overrides, keep=compiled)
        if isinstance(built, int):
            return built
        from ..runtime.run_build import RUN_FILES

        build_dir, files = built, {n: compiled[n].encode("utf-8") for n in RUN_FILES if n in compiled}
    else:
        if overrides:
            print("tuner run: --set applies to a settings file; this is a build directory "
                  "(recompile it with `tuner compile SETTINGS --set ...`)", file=sys.stderr)
            return EXIT_USAGE
        build_dir, files = target, None
    if getattr(args, "check", False):
        from .check import run_checks

        args.build_dir = build_dir
        code = run_checks(args, None, "tuner run")
        if code:
            return code

    from ..runtime import run_build
    from ..runtime.artefacts import RunError

    try:
        files = run_build.pinned(files if files is not None else run_build.read_build(build_dir), build_dir)
        with run_build.staged(files) as staged:  # checked in a private folder until the run holds its lock
            return _run_locked(args, target, run_build, files, staged)
    except RunError as exc:
        print(f"tuner run: {exc.message}", file=sys.stderr)
        return exc.exit_code


def _run_locked(args, target: Path, run_build, files: dict[str, bytes], arts: Artefacts) -> int:
    from ..runtime.extras import check_installed
    from ..runtime.launch import Topology, launch, worker_entry
    from ..runtime.run_lock import acquire_run_lock, check_output_dir

    _check_trainable(arts)
    check_installed(arts, trains=True)  # a missing package is named first: before the op cache, the data
    if arts.plan.uses_deepspeed:  # before anything slow: a stale build lock would hang every rank
        from ..runtime.op_cache import refuse_stale

        refuse_stale()
    topo = Topology.resolve(arts, getattr(args, "machine_rank", None), getattr(args, "main_address", None),
                            getattr(args, "main_port", None))
    machine = topo.machine_rank if topo.num_machines > 1 else None
    # One run per output directory (per machine of a multi-machine job); taking the lock
    # also proves the directory writable before any rank starts. The lock dies with this
    # process (kill -9 included).
    with acquire_run_lock(arts.output_dir, machine):
        # An output directory that holds a run is resumed when asked, refused otherwise.
        resume = check_output_dir(arts.output_dir, args.resume or arts.settings.checkpoint.resume, str(target))
        new_batch = bool(getattr(args, "new_global_batch", False))
        resume = _check_resume(arts, resume, args.max_steps, new_batch)
        _check_data(arts)
        _clear_stale_offload(arts)
        # From here the run reads only its own copy of the build, beside the lock: written last,
        # so a refused run never replaces an earlier run's.
        arts = _freeze(run_build, files, arts.output_dir, machine)
        entry = worker_entry(arts, resume, args.max_steps, getattr(args, "callback", None) or [], new_batch)
        return launch(arts, entry, topo)


def _freeze(run_build, files: dict[str, bytes], output_dir: Path, machine: int | None):
    from ..runtime.artefacts import RunError

    try:
        return run_build.freeze(files, output_dir, machine)
    except OSError as exc:
        from ..compiler.read.files import describe_os_error

        raise RunError(f"cannot write the run's copy of its build into {output_dir}: {describe_os_error(exc)}; "
                       "free space there or set output.dir to a writable directory") from None


def _check_trainable(arts: Artefacts) -> None:
    """A build compiled for another trainer (a family or standalone context parallelism
    tuner's runtime does not implement) is refused before any rank starts."""
    from ..compiler.artefacts.emit import ACCELERATE_YAML
    from ..runtime.artefacts import RunError
    from ..runtime.families import FAMILIES
    from ..runtime.run_build import SOURCE_KEY

    s = arts.settings
    if s.model.family not in FAMILIES:
        raise RunError(f"tuner run cannot train model family {s.model.family!r} (it trains {', '.join(sorted(FAMILIES))}); "
                       f"use the artefacts with your own trainer: accelerate launch --config_file "
                       f"{Path(arts.manifest.get(SOURCE_KEY) or arts.build_dir) / ACCELERATE_YAML} SCRIPT",
                       exit_code=EXIT_INVALID)
    from ..runtime.optim import missing_optimizer_package

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


def _check_data(arts: Artefacts) -> None:
    """Open and check the training data once, before any rank starts (runtime/data_sources/)."""
    from ..runtime.data_sources.check import check_run_data

    line = check_run_data(arts)
    if line:
        print(line, flush=True)


def _check_resume(arts: Artefacts, resume: str | None, max_steps: int | None = None, new_global_batch: bool = False) -> str:
    """Refuse a missing or incompatible checkpoint (another strategy tuner cannot carry, a
    world size that cannot keep the global batch), or one past the run's last step, before
    any rank starts (the trainer checks again on every rank). Returns what the ranks resume:
    `resume`, or the universal conversion of a ZeRO checkpoint written by another world size."""
    if not resume:
        return ""
    from ..runtime import checkpoint as ckpt
    from ..runtime import checkpoint_convert as convert
    from ..runtime.resume_rules import Layout, check_compatible

    path = ckpt.resolve_resume(resume, arts.output_dir)
    if path is None:
        return resume
    kind = ckpt.state_dict_kind(arts.strategy, arts.settings.checkpoint.state_dict_type)
    meta = ckpt.read_meta(path)
    t = arts.settings.training
    now = Layout.of(t, arts.plan.world_size)
    check_compatible(meta, arts.strategy, kind, now, path, new_global_batch)
    last = max_steps if max_steps is not None else t.max_steps
    if last > 0:  # 0: by epochs, known on the ranks once the data is read
        ckpt.check_step(meta, last, path)
    if convert.needs_universal(meta, arts.strategy, now.world):
        dest = convert.universal_dir(arts.output_dir, meta)
        print(f"converting {path} ({meta.strategy}, {meta.world_size} ranks) to DeepSpeed's universal checkpoint "
              f"for {now.world} ranks: {dest}", flush=True)
        return str(convert.to_universal(path, dest))
    return resume


def _clear_stale_offload(arts: Artefacts) -> None:
    """Before a DeepSpeed run: remove swap folders earlier runs left in the NVMe path."""
    if not arts.plan.uses_deepspeed:
        return
    from ..runtime.maintenance import clear_offload_cache

    ds = arts.deepspeed_config().get("zero_optimization", {})
    paths = {(ds.get(k) or {}).get("nvme_path") for k in ("offload_param", "offload_optimizer")}
    for p in sorted(x for x in paths if x):
        for gone in clear_offload_cache(p):
            print(f"removed stale DeepSpeed swap folder {gone}", file=sys.stderr)
