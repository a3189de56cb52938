"""DeepSpeed's config as the plan decides it, from settings: builder fields and/or a raw config.

The plan stage decides every value (and adopts what a raw config says into the settings);
the artefacts stage only renders the result as text (`compiler/artefacts/emit.py`).

The raw ``deepspeed.config`` (DeepSpeed's own structure, as in the seed's manual example)
wins where it says something; builder fields the person set fill the rest. The result is a
file accelerate users recognise (docs/artefacts.md says what it contains and why):

* an optimizer or scheduler block only when the settings (or the imported file) ask for one;
  not for ZeRO-Offload either: accelerate's `prepare` replaces a script's torch AdamW/Adam
  with DeepSpeed's CPU Adam when the JSON offloads the optimizer and names none;
* "auto" stays "auto" wherever accelerate fills it in `prepare` (`deepspeed_rules.ACCELERATE_FILLS`);
* a key neither the raw config nor a setting the person wrote gives is left out, so DeepSpeed's
  and accelerate's own defaults apply (no added clipping, pin_memory, aio, bucket sizes);
* values DeepSpeed's config models refuse are errors here, with the key path.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import Any, cast

from ..diagnostics import Diagnostics
from ..keys import paths as K
from ..keys.choices import MixedPrecision, ZeroStage
from ..keys.settings import Settings, global_batch
from . import deepspeed_rules
from .deepspeed_offload import blocks


def _as_int(value: Any) -> int:
    return int(float(value)) if not isinstance(value, int) else value


def _concrete(value: Any) -> bool:
    return value is not None and value != "auto"


def build(s: Settings, world_size: int, explicit: AbstractSet[str], diags: Diagnostics,
          disks: Callable[[str], Any] = lambda text: None, offload_bytes_hint: int = 0) -> tuple[dict[str, Any], Settings]:
    """The DeepSpeed JSON for settings `s`, and new settings with the values adopted from a
    raw config (`s` itself is not changed: the rules stage makes the plan from the new ones).

    `disks` gives an NVMe path's `inputs.DiskFacts` (what the gather stage measured).
    `offload_bytes_hint` is the estimator's figure for what NVMe must hold (0 = unknown).
    The new settings' `training.micro_batch_size` / `gradient_accumulation_steps` are the
    values the run really uses, which is what `tuner run` gives accelerate to fill any "auto".
    """
    raw: dict[str, Any] = copy.deepcopy(s.deepspeed.config) if isinstance(s.deepspeed.config, dict) else {}
    # A config with only builder fields describes the whole run through the settings; with a
    # raw config, only what it says and what the person set explicitly is written.
    builder = not raw
    zero_raw = raw.get("zero_optimization")
    if isinstance(zero_raw, dict):
        for which in ("offload_optimizer", "offload_param"):
            block = zero_raw.get(which)
            if isinstance(block, dict) and isinstance(block.get("device"), str):
                block["device"] = block["device"].strip().lower()  # DeepSpeed's enum is lower-case
    if not deepspeed_rules.check(raw, K.DEEPSPEED_CONFIG, diags):
        return raw, s
    out = raw
    batched = _batch(out, s, world_size, explicit, builder, diags)
    if batched is None:
        return out, s
    s = _precision(out, batched, explicit, diags)
    _clipping(out, s, explicit, diags)
    zero, s = _zero(out, s, explicit, builder, diags)
    if zero is None:
        return out, s
    s = blocks(out, zero, s, explicit, builder, diags, disks, offload_bytes_hint)
    deepspeed_rules.leftover_auto(out, K.DEEPSPEED_CONFIG, "", diags)
    # What tuner added is held to the same rules as the source: a refusal names every key to
    # change, and a compile that passes never writes a JSON DeepSpeed would reject.
    added = Diagnostics(file=diags.file, locate=diags.locate)
    deepspeed_rules.check(out, K.DEEPSPEED_CONFIG, added)
    diags.extend(added.errors)
    return out, s


def _batch(out: dict, s: Settings, world: int, explicit: AbstractSet[str], builder: bool,
           diags: Diagnostics) -> Settings | None:
    """train_batch_size = micro x accumulation x data-parallel world, checked where the numbers
    are known. A concrete value in the raw config sets the run's batch; "auto" stays for
    accelerate to fill from what tuner run passes it (the settings' values). The settings
    with the batch the run uses, or None when the numbers disagree."""
    t = s.training
    total_raw = out.get("train_batch_size")
    micro_raw = out.get("train_micro_batch_size_per_gpu")
    accum_raw = out.get("gradient_accumulation_steps")
    total = _as_int(total_raw) if _concrete(total_raw) else None
    micro = _as_int(micro_raw) if _concrete(micro_raw) else None
    accum = _as_int(accum_raw) if _concrete(accum_raw) else None
    for label, path, value, setting in (("train_micro_batch_size_per_gpu", K.TRAINING_MICRO_BATCH_SIZE, micro,
                                         t.micro_batch_size),
                                        ("gradient_accumulation_steps", K.TRAINING_GRADIENT_ACCUMULATION_STEPS,
                                         accum, t.gradient_accumulation_steps)):
        if value is not None and path in explicit and value != setting:
            diags.error(f"deepspeed.config.{label}",
                        f"{label} is {value!r} in the DeepSpeed config but {path} = {setting!r}",
                        f"set it in one place only (remove {label} from deepspeed.config or {path})")
            return None
    # Only a micro batch the person wrote is written: otherwise "auto", which accelerate fills
    # from the script's data loader (as its own YAML-only DeepSpeed setup does).
    micro_set = K.TRAINING_MICRO_BATCH_SIZE in explicit
    accum_set = K.TRAINING_GRADIENT_ACCUMULATION_STEPS in explicit or builder
    # The factors the run uses. accelerate reads a missing gradient_accumulation_steps as 1.
    derived_accum = False
    if accum is None:
        if accum_set or accum_raw == "auto":
            accum = t.gradient_accumulation_steps
        elif total is not None and micro is not None and accum_raw is None:
            # DeepSpeed derives it from the other two; accelerate would insert 1 instead and
            # DeepSpeed then refuses the batch, so the derived value is written.
            if total % (micro * world):
                diags.error("deepspeed.config.train_batch_size",
                            f"train_batch_size {total} is not divisible by train_micro_batch_size_per_gpu {micro} "
                            f"x world size {world}", "make train_batch_size a multiple of the other factors, or remove it")
                return None
            accum, derived_accum = total // (micro * world), True
            diags.note("deepspeed.config.gradient_accumulation_steps",
                       f"gradient_accumulation_steps = {accum}, derived from train_batch_size {total} as DeepSpeed "
                       "does (written: accelerate would otherwise assume 1)")
        else:
            accum = 1  # accelerate's value for a missing key
    if micro is None:
        if total is not None and micro_raw is None and not micro_set:
            if total % (accum * world):
                diags.error("deepspeed.config.train_batch_size",
                            f"train_batch_size {total} is not divisible by gradient_accumulation_steps {accum} "
                            f"x world size {world}", "make train_batch_size a multiple of the other factors, or remove it")
                return None
            micro = total // (accum * world)  # DeepSpeed derives it the same way
            diags.note("deepspeed.config.train_micro_batch_size_per_gpu",
                       f"micro batch {micro} per rank, derived from train_batch_size {total} as DeepSpeed does")
        else:
            micro = t.micro_batch_size
    expected = global_batch(micro, accum, world)
    if total is not None and total != expected:
        diags.error("deepspeed.config.train_batch_size",
                    f"train_batch_size {total!r} does not equal train_micro_batch_size_per_gpu {micro} "
                    f"x gradient_accumulation_steps {accum} x world size {world} = {expected}",
                    "remove train_batch_size (accelerate computes it), or change the micro batch, "
                    "the accumulation steps or hardware.num_processes so the product matches")
        return None
    # What the file says: the raw config's values as written; the settings' where set.
    micro_auto = micro_raw is None and total is None and not micro_set
    if micro_raw is None and micro_set:
        out["train_micro_batch_size_per_gpu"] = micro
    elif micro_auto:
        out["train_micro_batch_size_per_gpu"] = "auto"  # DeepSpeed needs one of the two; accelerate fills it
        diags.note("deepspeed.config.train_micro_batch_size_per_gpu",
                   "no micro batch in the settings or the DeepSpeed config: 'auto', filled by accelerate from "
                   f"the data loader (tuner run uses training.micro_batch_size = {micro})")
    if accum_raw is None and (accum_set or derived_accum):
        out["gradient_accumulation_steps"] = accum
    if total_raw is None and builder:
        out["train_batch_size"] = "auto" if micro_auto else expected
    if (micro, accum) != (t.micro_batch_size, t.gradient_accumulation_steps):
        diags.note(K.DEEPSPEED_CONFIG, f"micro batch {micro} and accumulation {accum} come from the DeepSpeed config")
        return replace(s, training=replace(t, micro_batch_size=micro, gradient_accumulation_steps=accum))
    return s


def _precision(out: dict, s: Settings, explicit: AbstractSet[str], diags: Diagnostics) -> Settings:
    """bf16/fp16 follow training.mixed_precision unless the raw config decides. "auto" stays:
    accelerate fills it from its mixed-precision setting (tuner run passes the settings').
    The settings with the precision the run uses."""
    t = s.training
    blocks: tuple[MixedPrecision, ...] = ("bf16", "fp16")
    for block in blocks:
        section = out.get(block) or (out.get("bfloat16") if block == "bf16" else None)
        enabled = section.get("enabled") if isinstance(section, dict) else None
        if enabled in (True, "true", "True", 1) and t.mixed_precision != block:
            if K.TRAINING_MIXED_PRECISION in explicit:
                diags.error(f"deepspeed.config.{block}.enabled",
                            f"the DeepSpeed config enables {block} but training.mixed_precision = {t.mixed_precision!r}",
                            "set the precision in one place only")
                return s
            diags.note(f"deepspeed.config.{block}", f"mixed precision {block} taken from the DeepSpeed config")
            t = replace(t, mixed_precision=block)
    s = replace(s, training=t)
    mp = t.mixed_precision
    if mp not in ("bf16", "fp16"):
        return s
    key = "bfloat16" if mp == "bf16" and "bfloat16" in out and "bf16" not in out else mp
    section = out.setdefault(key, {})
    if section.get("enabled") == "auto":
        diags.note(f"deepspeed.config.{key}.enabled", f"'auto': accelerate fills it from its mixed precision "
                   f"(tuner run passes {mp}; with accelerate launch, pass --mixed_precision {mp})")
    elif "enabled" not in section:
        section["enabled"] = True
        if mp == "fp16" and len(section) == 1:
            # What accelerate writes for fp16 when the DeepSpeed config has no fp16 block
            # (`DeepSpeedPlugin.set_mixed_precision`): a settings-made config means the same.
            section["auto_cast"] = True
    return s


def _clipping(out: dict, s: Settings, explicit: AbstractSet[str], diags: Diagnostics) -> None:
    """Written only when the raw config or a setting the person wrote asks: DeepSpeed's
    default is no clipping."""
    if K.DEEPSPEED_GRADIENT_CLIPPING in explicit:
        path, value = K.DEEPSPEED_GRADIENT_CLIPPING, s.deepspeed.gradient_clipping
    elif K.TRAINING_MAX_GRAD_NORM in explicit:
        path, value = K.TRAINING_MAX_GRAD_NORM, s.training.max_grad_norm
    else:
        return
    if "gradient_clipping" in out and out["gradient_clipping"] != "auto" and float(out["gradient_clipping"]) != value:
        diags.error("deepspeed.config.gradient_clipping",
                    f"gradient_clipping is {out['gradient_clipping']!r} in the DeepSpeed config but {path} = {value!r}",
                    f"set it in one place only (remove gradient_clipping from deepspeed.config or {path})")
    elif "gradient_clipping" not in out:
        out["gradient_clipping"] = value


def _zero(out: dict, s: Settings, explicit: AbstractSet[str], builder: bool,
          diags: Diagnostics) -> tuple[dict | None, Settings]:
    """The zero_optimization block (None where it contradicts the settings), and the settings
    with the ZeRO stage the run uses."""
    ds = s.deepspeed
    zero = out.get("zero_optimization")
    if zero is None:
        zero = out["zero_optimization"] = {}
    stage = zero.get("stage")
    if stage is None:
        if builder or K.DEEPSPEED_ZERO_STAGE in explicit:
            zero["stage"] = stage = ds.zero_stage
        else:  # written: accelerate refuses a DeepSpeed config without a zero_optimization block
            zero["stage"] = stage = 0
            diags.note("deepspeed.config.zero_optimization.stage", "no ZeRO stage in the DeepSpeed config: "
                       "DeepSpeed's default, stage 0, applies")
    elif K.DEEPSPEED_ZERO_STAGE in explicit and stage != ds.zero_stage:
        diags.error("deepspeed.config.zero_optimization.stage",
                    f"zero_optimization.stage is {stage!r} in the DeepSpeed config but deepspeed.zero_stage = {ds.zero_stage!r}",
                    "set it in one place only")
        return None, s
    # deepspeed_rules.check has refused any stage DeepSpeed does not know (0-3)
    s = replace(s, deepspeed=replace(ds, zero_stage=cast(ZeroStage, stage)))
    hidden = [k for k in ("reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                          "prefetch_bucket_size", "param_persistence_threshold") if zero.get(k) == "auto"]
    if hidden and s.model.trained_family == "diffusion":
        diags.error(f"deepspeed.config.zero_optimization.{hidden[0]}",
                    "accelerate fills these 'auto' bucket sizes from model.config.hidden_size, which diffusion "
                    f"models do not have, so prepare would fail: {', '.join(hidden)}", "write numbers for them")
    for short in ("prefetch_bucket_size", "param_persistence_threshold"):
        if zero.get(short) == "auto" and f"stage3_{short}" not in zero:
            # DeepSpeed knows the field under both names; accelerate fills only the stage3_ one.
            zero[f"stage3_{short}"] = zero.pop(short)
            diags.note(f"deepspeed.config.zero_optimization.{short}", f"written as stage3_{short} (the same "
                       "DeepSpeed field), the name under which accelerate fills 'auto'")
    if stage == 3:
        names = ("gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save",
                 "stage3_gather_fp16_weights_on_model_save")  # DeepSpeed refuses two of them together
        if not any(n in zero for n in names):
            if builder or K.DEEPSPEED_GATHER_16BIT_WEIGHTS_ON_MODEL_SAVE in explicit:
                zero[names[1]] = ds.gather_16bit_weights_on_model_save
            elif s.checkpoint.export:
                diags.warning("deepspeed.config.zero_optimization.stage3_gather_16bit_weights_on_model_save",
                              "unset, so DeepSpeed's default (false) applies and tuner run cannot export a full "
                              "model at the end of a ZeRO-3 run",
                              "set it to true in the DeepSpeed config, or checkpoint.export = false")
    return zero, s
