"""The narrow compatibility layer that lets accelerate's own FSDP/DeepSpeed paths run on CPU.

On a machine without GPUs accelerate cannot be told to use FSDP or DeepSpeed on gloo ranks
(observed with accelerate 1.15, see docs/cpu-distributed-facts.md):

* `AcceleratorState` promotes to `DistributedType.FSDP` only inside its GPU-family branch,
  so with gloo ranks it stays `MULTI_CPU` and `prepare` would wrap the model in DDP;
* with DeepSpeed selected and ``use_cpu`` off it takes the DeepSpeed branch but leaves
  ``process_index == 0`` and ``num_processes == 1`` on every rank (unsharded dataloaders,
  "main process only" code on every rank); with ``use_cpu`` on it ignores DeepSpeed.

`correct_state` runs once, right after the `Accelerator` is constructed on gloo ranks, and
only when no GPU is in use. It sets, in the shared state of both `PartialState` and
`AcceleratorState`, exactly what accelerate would have set on GPUs: the distributed type
the artefacts compiled to, the plugin the environment described, and rank/world size from
`torch.distributed`. Everything after that (`prepare`, `backward`, `save_state`,
`load_state`, `get_state_dict`) is accelerate's production code, unchanged. The runtime's
tests check the result: real DTensor sharding, DeepSpeed partitions, disjoint data shards
and rank-0-only writes.

Because it writes accelerate's private state, the layer is tied to the accelerate versions it
was tested with (`TESTED_ACCELERATE`, the range pyproject.toml declares): another version is
refused before training (`check_accelerate_version`; ``TUNER_ALLOW_UNTESTED=1`` to try it
anyway), and after every correction `verify` reads accelerate's state back and fails, naming
both types and the version, if the distributed type is not the plan's.

tuner's trainer calls `correct_state` itself. For a person's own script (`tuner launch`),
`install` wraps ``Accelerator.__init__`` in that process (before the script runs, from
`runtime/bootstrap.py`) so that every `Accelerator` built there, the HF Trainer's
included, is corrected right after its constructor, with the plugin objects the caller
passed (the HF Trainer hands over its own `DeepSpeedPlugin`).
"""

from __future__ import annotations

import os
from typing import Any

from ..compiler.plan.strategy import Strategy
from .artefacts import RunError

#: The accelerate versions this layer is tested with: the `accelerate` requirement of
#: pyproject.toml's `runtime` extra (tests/runtime/test_cpu_shim.py keeps them equal).
TESTED_ACCELERATE = ">=1.15,<1.16"
ALLOW_UNTESTED_ENV = "TUNER_ALLOW_UNTESTED"


def needed(accelerator: Any) -> bool:
    return accelerator.device.type == "cpu"


def accelerate_version() -> str:
    from importlib.metadata import version

    return version("accelerate")


def check_accelerate_version(installed: str, allow_untested: bool | None = None) -> bool:
    """Refuse an accelerate outside `TESTED_ACCELERATE` (`RunError`), unless allowed by
    `allow_untested` (default: ``TUNER_ALLOW_UNTESTED=1`` in the environment). Returns
    whether `installed` is a tested version."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    if allow_untested is None:
        allow_untested = os.environ.get(ALLOW_UNTESTED_ENV, "") not in ("", "0")
    try:
        ok = Version(installed) in SpecifierSet(TESTED_ACCELERATE)
    except InvalidVersion:
        ok = False
    if not ok and not allow_untested:
        raise RunError(f"tuner's CPU layer is tested with accelerate {TESTED_ACCELERATE}; you have {installed}: "
                       f"install a tested version (pip install 'accelerate{TESTED_ACCELERATE}') or set "
                       f"{ALLOW_UNTESTED_ENV}=1 to try this one")
    return ok


def cpu_type(plan_type: str) -> str:
    """The accelerate distributed type a plan's type is on CPU gloo ranks (a build made for
    GPUs that runs on CPU: data parallel is MULTI_CPU there)."""
    return "MULTI_CPU" if plan_type == "MULTI_GPU" else plan_type


def accepted_types(plan_type: str) -> set[str]:
    """What accelerate may report for the plan on CPU ranks. A one-process plan (NO) still
    runs as one rank started by torch's elastic launcher, and accelerate reads that rank's
    environment (WORLD_SIZE=1, LOCAL_RANK=0) as MULTI_CPU: the same training, one process."""
    want = cpu_type(plan_type)
    return {want, "MULTI_CPU"} if want == "NO" else {want}


def install(strategy: Strategy, plan_type: str | None = None) -> None:
    """Correct every `Accelerator` built in this process from now on (idempotent)."""
    from accelerate import Accelerator

    check_accelerate_version(accelerate_version())
    if getattr(Accelerator.__init__, "_tuner_shim", False):
        return
    original = Accelerator.__init__

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        given = {k: kwargs.get(k) for k in ("fsdp_plugin", "deepspeed_plugin", "deepspeed_plugins")}
        correct_state(self, strategy, given, plan_type)
        if strategy.is_deepspeed and needed(self):
            self.native_amp = False  # DeepSpeed's JSON decides precision, as on GPUs

    __init__._tuner_shim = True  # type: ignore[attr-defined]
    __init__.__doc__ = original.__doc__
    Accelerator.__init__ = __init__
    _install_partial_state()


def _install_partial_state() -> None:
    """A bare `PartialState()` (a script may build one and no `Accelerator`, as accelerate's own
    test_ops.py does) reads ``ACCELERATE_USE_CPU`` as `AcceleratorState` does. accelerate's
    `PartialState` ignores that variable, so on gloo ranks without a GPU it found no backend and
    came up as a one-process world on every rank (its gathers then returned one rank's data, or,
    on DeepSpeed builds, failed with a gloo all-gather length error); with it, it is the
    MULTI_CPU world of the launch: every rank, the real world size, as on GPUs. An `Accelerator`
    built later is corrected as before (`correct_state`)."""
    from accelerate.state import PartialState
    from accelerate.utils import parse_flag_from_env

    if getattr(PartialState.__init__, "_tuner_shim", False):
        return
    original = PartialState.__init__

    def __init__(self, cpu: bool = False, **kwargs: Any) -> None:
        original(self, cpu or parse_flag_from_env("ACCELERATE_USE_CPU"), **kwargs)

    __init__._tuner_shim = True  # type: ignore[attr-defined]
    __init__.__doc__ = original.__doc__
    PartialState.__init__ = __init__


def correct_state(accelerator: Any, strategy: Strategy | str, given: dict[str, Any] | None = None,
                  plan_type: str | None = None) -> list[str]:
    """Fix accelerate's state for `strategy` (the plan's) on CPU ranks, then `verify` it took
    effect (against `plan_type`, the manifest's ``plan.distributed_type``); returns what changed."""
    import torch.distributed as dist

    if not needed(accelerator) or not dist.is_initialized():
        return []
    check_accelerate_version(accelerate_version())
    strategy = Strategy(strategy)
    changes = _apply(strategy, given or {})
    verify(accelerator, plan_type or _type_of(strategy, dist.get_world_size()))
    return changes


def _type_of(strategy: Strategy, world: int) -> str:
    if strategy.is_fsdp:
        return "FSDP"
    if strategy.is_deepspeed:
        return "DEEPSPEED"
    return "MULTI_CPU" if world > 1 else "NO"


def verify(accelerator: Any, plan_type: str) -> None:
    """accelerate's distributed type, read back through its public objects, must be the plan's
    (on CPU); if the writes did not take (accelerate keeps its state elsewhere now), say so
    rather than train with another strategy than the one compiled."""
    from accelerate.state import AcceleratorState, PartialState

    want = cpu_type(plan_type)
    seen = {"Accelerator": accelerator.distributed_type, "AcceleratorState": AcceleratorState().distributed_type,
            "PartialState": PartialState().distributed_type}
    wrong = {k: getattr(v, "name", str(v)) for k, v in seen.items()
             if getattr(v, "name", str(v)) not in accepted_types(plan_type)}
    if wrong:
        got = ", ".join(f"{k} {v}" for k, v in wrong.items())
        raise RunError(f"tuner's CPU layer did not take effect: the plan's distributed type is {want} but accelerate "
                       f"reports {got} (accelerate {accelerate_version()}; the layer is tested with accelerate "
                       f"{TESTED_ACCELERATE})")


def _apply(strategy: Strategy, given: dict[str, Any]) -> list[str]:
    """Write what accelerate would have set on GPUs into both shared states."""
    import torch.distributed as dist
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DeepSpeedPlugin, DistributedType, FullyShardedDataParallelPlugin

    changes: list[str] = []
    shared = [PartialState._shared_state, AcceleratorState._shared_state]

    def show(v: Any) -> Any:
        return type(v).__name__ if hasattr(v, "__dataclass_fields__") else getattr(v, "name", v)

    def put(key: str, value: Any) -> None:
        for st in shared:
            if st.get(key) is not value and st.get(key) != value:
                if st is shared[1]:
                    changes.append(f"{key}: {show(st.get(key))} -> {show(value)}")
                st[key] = value

    rank, world = dist.get_rank(), dist.get_world_size()
    put("process_index", rank)
    put("num_processes", world)
    put("local_process_index", int(os.environ.get("LOCAL_RANK", rank)))

    if strategy.is_fsdp:
        plugin = (AcceleratorState._shared_state.get("fsdp_plugin") or given.get("fsdp_plugin")
                  or FullyShardedDataParallelPlugin())
        mp = AcceleratorState._shared_state.get("_mixed_precision", "no")
        if mp != "no":
            plugin.set_mixed_precision(mp)
        put("fsdp_plugin", plugin)
        put("distributed_type", DistributedType.FSDP)
    elif strategy.is_deepspeed:
        plugins = (AcceleratorState._shared_state.get("deepspeed_plugins") or given.get("deepspeed_plugins")
                   or given.get("deepspeed_plugin") or DeepSpeedPlugin())
        if not isinstance(plugins, dict):
            plugins.set_mixed_precision(AcceleratorState._shared_state.get("_mixed_precision", "no"))
            plugins.select(_from_accelerator_state=True)
        put("deepspeed_plugins", plugins)
        put("distributed_type", DistributedType.DEEPSPEED)
        # DeepSpeed decides precision from its JSON (accelerate does the same on GPUs).
        put("_mixed_precision", "no")
    elif world > 1:
        put("distributed_type", DistributedType.MULTI_CPU)
    return changes
