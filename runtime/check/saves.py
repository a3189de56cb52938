"""What the ranks write (`save`): a state dict of shards saved as if it were the model.

The observer wraps ``torch.save`` and ``safetensors.torch.save_file`` (and the names accelerate
and transformers imported them under) during the rehearsal and looks at the tensors written: a
sharded FSDP2 parameter (a DTensor: ``model.state_dict()`` under FSDP2, or
``get_peft_model_state_dict`` of a sharded PEFT model) in the file means the file holds this
rank's shard only (ZeRO-3's partitions are not judged yet). Saving is judged where the
rehearsal reaches it
(a script that saves after its first steps, or ``TUNER_CHECK_STEPS`` long enough).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .findings import Finding, fault, ok, skipped

_get_run: list[Callable[[], dict]] = []
_emas: list[Any] = []  # EMA objects that stepped (diffusers' EMAModel, torch's AveragedModel)


def install(get_run: Callable[[], dict], safe) -> None:
    import torch
    from torch.optim import swa_utils

    _get_run.append(get_run)
    _watch_ema(swa_utils.AveragedModel, "update_parameters", safe)
    torch.save = _wrap(torch.save, safe)
    try:
        import safetensors.torch as st
    except ImportError:
        return
    setattr(st, "save_file", _wrap(st.save_file, safe))  # noqa: B010
    # modules that imported the functions by name before the observer started
    for name in ("accelerate.utils.other", "transformers.modeling_utils", "peft.utils.save_and_load"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "save_file", None) is not None:
            setattr(mod, "save_file", st.save_file)  # noqa: B010 - a module's attribute, on purpose


def watch_diffusers_ema(safe) -> None:
    """diffusers' EMAModel, once a script imported it (importing diffusers here would cost seconds)."""
    mod = sys.modules.get("diffusers.training_utils")
    if mod is not None and hasattr(mod, "EMAModel"):
        _watch_ema(mod.EMAModel, "step", safe)


def _watch_ema(cls, method: str, safe) -> None:
    original = getattr(cls, method)
    if getattr(original, "_tuner_check", False):
        return

    def stepped(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        safe(_ema_stepped)(self)
        return out

    stepped._tuner_check = True  # type: ignore[attr-defined]
    setattr(cls, method, stepped)


def _ema_stepped(ema) -> None:
    run = _get_run[0]()
    run["ema_steps"] = run.get("ema_steps", 0) + 1
    if not any(e is ema for e in _emas):
        _emas.append(ema)


def _shadows(ema) -> list[Any]:
    if hasattr(ema, "shadow_params"):
        return list(ema.shadow_params)
    module = getattr(ema, "module", None)
    return list(module.parameters()) if module is not None else []


def _holds_ema(tensors: list[Any]) -> bool:
    import torch

    shadows = [s for e in _emas for s in _shadows(e)]
    for t in tensors[:2000]:
        for s in shadows:
            if tuple(s.shape) == tuple(t.shape) and t.numel() and torch.equal(t.detach().cpu(), s.detach().cpu()):
                return True
    return False


def _wrap(original, safe):
    if getattr(original, "_tuner_check", False):
        return original

    def save(obj, *args, **kwargs):
        safe(_note)(obj)
        return original(obj, *args, **kwargs)

    save._tuner_check = True  # type: ignore[attr-defined]
    return save


def _note(obj) -> None:
    tensors: list[Any] = []

    def walk(v, depth=0):
        if depth > 4:
            return
        if hasattr(v, "shape") and hasattr(v, "dtype"):
            tensors.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x, depth + 1)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x, depth + 1)

    walk(obj)
    if not tensors:
        return
    sharded = [t for t in tensors if hasattr(t, "to_local") and hasattr(t, "placements")
               and any(type(p).__name__ == "Shard" for p in t.placements)]
    kept = sum(int(t.to_local().numel()) for t in sharded)
    full = sum(int(t.numel()) for t in sharded)
    _get_run[0]().setdefault("saves", []).append({"tensors": len(tensors), "sharded": len(sharded),
                                                  "kept": kept, "full": full,
                                                  "ema": bool(_emas) and _holds_ema(tensors)})


def judge_ema(runs: dict[int, dict]) -> list[Finding]:
    stepped = {r: run.get("ema_steps", 0) for r, run in runs.items()}
    if not any(stepped.values()):
        return [skipped("ema", "all", "no EMA of the weights (diffusers' EMAModel, torch's AveragedModel) stepped")]
    saves = [(r, s) for r, run in sorted(runs.items()) for s in run.get("saves") or []]
    if not saves:
        return [skipped("ema", "all", f"an EMA stepped {max(stepped.values())} times; no save reached in the rehearsal")]
    if any(s["ema"] for _, s in saves):
        return [ok("ema", "all", "a save wrote the EMA weights")]
    r = saves[0][0]
    return [fault("ema", f"rank {r}", f"an EMA of the weights stepped {stepped[r]} times, but no save wrote it "
                  f"({len(saves)} save(s), each of the raw training weights): the export is not the EMA model",
                  "write the EMA weights into the export: ema.store(params); ema.copy_to(params); save; "
                  "ema.restore(params) (diffusers' EMAModel), or save ema.state_dict() / the AveragedModel")]


def judge(runs: dict[int, dict]) -> list[Finding]:
    saves = {r: run.get("saves") or [] for r, run in runs.items()}
    if not any(saves.values()):
        return [skipped("save", "all", "no save reached in the rehearsal")]
    for r, got in sorted(saves.items()):
        for s in got:
            if s["sharded"]:
                share = s["kept"] / max(1, s["full"])
                return [fault("save", f"rank {r}", f"wrote a state dict whose {s['sharded']} of {s['tensors']} tensors "
                              f"are FSDP2 shards (DTensors): the file holds this rank's {share:.0%} of them, the rest "
                              "is on the other ranks and lost",
                              "gather a full state dict on every rank, then write it on the main process: "
                              "accelerator.save_model(model, dir) (or state = accelerator.get_state_dict(model) on all "
                              "ranks); for LoRA adapters, get_peft_model_state_dict(model, state_dict=state)")]
    n = sum(len(v) for v in saves.values())
    return [ok("save", "all", f"{n} save(s) wrote whole tensors")]
