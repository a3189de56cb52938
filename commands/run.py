"""`tuner run TARGET`: train from a build directory (or a settings file, compiled first).

The runtime reads only the compiled artefacts (manifest.json, accelerate.yaml,
deepspeed.json). Given a settings file, this command compiles it (with any ``--set``
overrides) into ``build/`` beside it first, exactly as `tuner compile` would.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..compiler.diagnostics import EXIT_INVALID, EXIT_USAGE
from .compile_first import compile_settings


def run(args) -> int:
    target: Path = args.target
    overrides = list(getattr(args, "overrides", []) or [])
    if target.is_file():
        built = compile_settings(target, overrides)
        if isinstance(built, int):
            return built
        build_dir = built
    else:
        if overrides:
            print("tuner run: --set applies to a settings file; this is a build directory "
                  "(recompile it with `tuner compile SETTINGS --set ...`)", file=sys.stderr)
            return EXIT_USAGE
        build_dir = target
    if getattr(args, "check", False):
        from .check import run_checks

        args.build_dir = build_dir
        code = run_checks(args, None, "tuner run")
        if code:
            return code

    from ..runtime.artefacts import RunError, load
    from ..runtime.run_lock import acquire_run_lock, check_output_dir

    try:
        arts = load(build_dir)
        _check_trainable(arts)
        from ..runtime.launch import Topology, launch, worker_entry

        topo = Topology.resolve(arts, getattr(args, "machine_rank", None), getattr(args, "main_address", None),
                                getattr(args, "main_port", None))
        # One run per output directory (per machine of a multi-machine job); taking the lock
        # also proves the directory writable before any rank starts. The lock dies with this
        # process (kill -9 included).
        with acquire_run_lock(arts.output_dir, topo.machine_rank if topo.num_machines > 1 else None):
            # An output directory that holds a run is resumed when asked, refused otherwise.
            resume = check_output_dir(arts.output_dir, args.resume or arts.settings.checkpoint.resume, str(target))
            new_batch = bool(getattr(args, "new_global_batch", False))
            resume = _check_resume(arts, resume, args.max_steps, new_batch)
            from ..runtime.extras import check_installed

            check_installed(arts, trains=True)  # a missing package is named before the data is read
            _check_data(arts)
            _clear_stale_offload(arts)
            entry = worker_entry(arts, resume, args.max_steps, getattr(args, "callback", None) or [], new_batch)
            return launch(arts, entry, topo)
    except RunError as exc:
        print(f"tuner run: {exc.message}", file=sys.stderr)
        return exc.exit_code


def _check_trainable(arts) -> None:
    """A build compiled for another trainer (a family or standalone context parallelism
    tuner's runtime does not implement) is refused before any rank starts."""
    from ..runtime.artefacts import RunError
    from ..runtime.families import FAMILIES

    s = arts.settings
    if s.model.family not in FAMILIES:
        raise RunError(f"tuner run cannot train model family {s.model.family!r} (it trains {', '.join(sorted(FAMILIES))}); "
                       f"use the artefacts with your own trainer: accelerate launch --config_file "
                       f"{arts.accelerate_yaml} SCRIPT", exit_code=EXIT_INVALID)
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


def _check_data(arts) -> None:
    """Open and check the training data once, before any rank starts (runtime/data_sources/)."""
    from ..runtime.data_sources.check import check_run_data

    line = check_run_data(arts)
    if line:
        print(line, flush=True)


def _check_resume(arts, resume: str | None, max_steps: int | None = None, new_global_batch: bool = False) -> str:
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


def _clear_stale_offload(arts) -> None:
    """Before a DeepSpeed run: remove swap folders earlier runs left in the NVMe path."""
    if not arts.plan.uses_deepspeed:
        return
    from ..runtime.maintenance import clear_offload_cache

    ds = arts.deepspeed_config().get("zero_optimization", {})
    paths = {(ds.get(k) or {}).get("nvme_path") for k in ("offload_param", "offload_optimizer")}
    for p in sorted(x for x in paths if x):
        for gone in clear_offload_cache(p):
            print(f"removed stale DeepSpeed swap folder {gone}", file=sys.stderr)
