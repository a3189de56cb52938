"""What a SimpleTuner config trains, as tuner settings: SimpleTuner's defaults for the keys it
leaves unset, the model its family and flavour imply, and its keys that change what is trained,
each mapped, named in its own note, or refused (exit 1) where tuner's settings cannot say it.
The values and where SimpleTuner sets them: `simpletuner_defaults.py`, `simpletuner_models.py`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..keys import paths as K
from . import simpletuner_defaults as D
from .base import Imported, ImportRefused
from .simpletuner_models import model_path

#: Keys whose tuner alias means something else in SimpleTuner: read here, not by the alias.
OWN_MEANING = frozenset({
    "validation_steps",  # SimpleTuner's image-sampling interval (validation_step_interval), not an eval loss
    "adam_weight_decay",  # only DeepSpeed's optimizer uses it (trainer.py:4139): see finish()
    "resume_from_checkpoint",  # "latest" starts fresh when there is none: tuner's "auto"
    "lr_scheduler",  # SimpleTuner's cosine/sine are its own: see _schedule()
})
#: Keys this module reads itself (not listed again).
CONSUMED = frozenset({"lora_type", "optimizer_config", "peft_lora_target_modules", "data_backend_config",
                      "lora_alpha"})


def _on(value: Any) -> bool:
    return bool(value) and str(value).strip().lower() not in ("false", "0", "no", "off", "none", "")


#: key -> (does this value make the file untrainable by tuner?, why, the fix)
REFUSED: dict[str, tuple[Any, str, str]] = {
    "controlnet": (_on, "trains a ControlNet beside the frozen model; tuner trains the model or a LoRA on it",
                   "remove controlnet (or set it false) to train the model itself"),
    "control": (_on, "trains with channel-concatenated control inputs; tuner has no such input",
                "remove control (or set it false)"),
    "distillation_method": (_on, "trains a distilled student (SimpleTuner's distillation); tuner trains no "
                            "distillation", "remove distillation_method"),
    "use_dora": (_on, "trains DoRA (weight-decomposed LoRA); tuner's model.type = 'lora' is plain LoRA",
                 "set use_dora false"),
    "peft_lora_mode": (lambda v: _on(v) and str(v).lower() != "standard",
                       "trains a LoRA variant (SingLoRA) tuner has no setting for", "remove peft_lora_mode"),
    "train_text_encoder": (_on, "also trains the text encoder; tuner trains the denoiser only",
                           "set train_text_encoder false"),
    "init_lora": (_on, "starts the LoRA from an existing adapter file; tuner starts a fresh LoRA",
                  "remove init_lora"),
}


#: Keys named with what to do instead (their generic note is below).
NOTES = {
    "lr_scale": "when true SimpleTuner multiplies learning_rate by batch x accumulation x processes (its square root "
                "with lr_scale_sqrt; trainer.py:1191-1203); not carried: set training.learning_rate to the product",
    "lr_num_cycles": "used only by schedules tuner refuses or does not run (SimpleTuner's cosine family); not carried",
}


def apply(raw: dict[str, Any], path: Path, out: Imported, other: dict[str, Any]) -> None:
    """Carry SimpleTuner's meaning into ``out``; move the keys it names out of ``other``
    (the catch-all list). Raises ImportRefused naming every key tuner cannot train as written."""
    src = path.name
    problems: list[str] = []
    _model(raw, src, out, problems)
    _schedule(raw, src, out, problems)
    _defaults(raw, src, out)
    _objectives(raw, src, out)
    _lora(raw, src, out, problems)
    _data(raw, src, out)
    precision = str(raw.get("base_model_precision", "no_change")).strip().lower()
    if precision not in ("no_change", "nf4-bnb"):
        out.remarks.append(f"{src}: base_model_precision = {precision!r} (a quantised frozen base) is carried as "
                           "model.base_precision; tuner run trains no_change and nf4-bnb only and refuses it, the "
                           "compiled launch files serve your own trainer")
    if str(raw.get("mixed_precision", "")).strip().lower() == "fp8":
        problems.append("mixed_precision = 'fp8': SimpleTuner trains with fp8 compute (field_registry/sections/"
                        "advanced.py:694); tuner compiles no, fp16 or bf16 (accelerate's fp8 recipes have no tuner "
                        "setting); set bf16")
    for key in list(other):
        if key in CONSUMED:
            other.pop(key)
            continue
        if key in REFUSED:
            untrainable, why, fix = REFUSED[key]
            if untrainable(other[key]):
                problems.append(f"{key} = {other[key]!r}: SimpleTuner {why}; {fix}")
            else:
                other.pop(key)  # off: what tuner trains
            continue
        section = D.training_section(key)
        if key in NOTES:
            out.remarks.append(f"{src}: {key} = {other.pop(key)!r}: {NOTES[key]}")
        elif section is not None:
            out.remarks.append(f"{src}: {key} = {other.pop(key)!r}: a SimpleTuner training option ({section}) "
                               "tuner has no setting for; not carried, tuner trains without it")
    if problems:
        raise ImportRefused(f"{path}: tuner cannot train this SimpleTuner config as written (nothing imported):\n  - "
                            + "\n  - ".join(problems))


def _model(raw: dict[str, Any], src: str, out: Imported, problems: list[str]) -> None:
    if "pretrained_model_name_or_path" in raw or "model_name" in raw:
        return
    family, flavour = raw.get("model_family"), raw.get("model_flavour")
    if not family:
        problems.append("no pretrained_model_name_or_path and no model_family, so the model SimpleTuner trains "
                        "cannot be derived (tuner will not put its built-in toy model in its place); set "
                        "pretrained_model_name_or_path")
        return
    found, why = model_path(str(family), str(flavour) if flavour else None)
    if found is None:
        problems.append(f"no pretrained_model_name_or_path, and {why}; set pretrained_model_name_or_path"
                        + ("" if flavour or "flavours:" not in why else " or model_flavour"))
        return
    out.set(K.MODEL_PATH, found, src)
    out.remarks.append(f"{src}: pretrained_model_name_or_path unset: {why} is {found} "
                       "(simpletuner/helpers/models/common.py:1214-1228), imported as model.path")


def _schedule(raw: dict[str, Any], src: str, out: Imported, problems: list[str]) -> None:
    name = raw.get("lr_scheduler")
    if name is None:
        return  # the default, constant_with_warmup: the same in transformers
    text = str(name).strip().lower()
    if text in D.OWN_SCHEDULES:
        problems.append(f"lr_scheduler = {name!r} is SimpleTuner's own restarting schedule (one cycle every "
                        "lr_warmup_steps x processes, custom_schedule.py:496-533), not transformers' schedule of that "
                        "name, which tuner runs (one decay over the run); set lr_scheduler to constant, "
                        "constant_with_warmup, linear or polynomial, which mean the same in both")
        return
    out.set(K.TRAINING_LR_SCHEDULER, name, src)
    if text == "polynomial":
        for path, key, value, where in D.POLYNOMIAL_DEFAULTS:
            out.default(path, value, src, f"{key} unset: SimpleTuner's polynomial default {value!r} "
                        f"({where}) imported as {path}")


def _objectives(raw: dict[str, Any], src: str, out: Imported) -> None:
    """The diffusion objectives tuner reads by SimpleTuner's names (training.flow_shift, noise_offset...):
    where SimpleTuner's default or its use differs from tuner's, named."""
    reg = "field_registry/sections/advanced.py"
    if "noise_offset" in raw:
        chance = raw.get("noise_offset_probability", 0.25)
        out.remarks.append(f"{src}: noise_offset = {raw['noise_offset']!r}: carried as training.noise_offset, which tuner "
                           f"adds on every step; SimpleTuner adds it with noise_offset_probability {chance!r} (0.25 "
                           f"unless set, {reg}:856-861), so the offset trained differs")
    else:
        out.remarks.append(f"{src}: noise_offset unset: SimpleTuner adds an offset of 0.1 with probability 0.25 "
                           f"({reg}:835-861); tuner's training.noise_offset stays 0 (none): set it to train with one")
    if "flow_schedule_shift" not in raw:
        out.remarks.append(f"{src}: flow_schedule_shift unset: SimpleTuner shifts a flow-matching model's timesteps "
                           f"by 3.0 ({reg}:509-515); tuner's training.flow_shift stays 1.0: set training.flow_shift = 3.0 "
                           "for a flow-matching model")


def _defaults(raw: dict[str, Any], src: str, out: Imported) -> None:
    for path, key, value, where in D.DEFAULTS:
        if key not in raw:
            out.default(path, value, src, f"{key} unset: SimpleTuner's default {value!r} ({where}) imported as {path}")
    if "seed" not in raw:
        out.remarks.append(f"{src}: seed unset: SimpleTuner draws a new random seed each run (field_registry/sections/"
                           "model.py:230); tuner trains with a fixed one (training.seed = 42): set training.seed to "
                           "choose it")
    out.default(K.DATA_VALIDATION_SPLIT, 0.0, src, "SimpleTuner holds no training rows out (evaluation uses its own "
                "data backends): data.validation_split = 0")
    if str(out.values.get(K.FSDP_ENABLED, False)).lower() in ("true", "1"):
        for path, key, value, where in D.FSDP_DEFAULTS:
            if key not in raw:
                out.default(path, value, src, f"{key} unset: SimpleTuner's default ({where}) imported as {path}")
    value = raw.get("resume_from_checkpoint", "latest")  # field_registry/sections/model.py:284
    if str(value).lower() == "latest":  # none there: a fresh start (simpletuner/helpers/training/trainer.py:5031)
        out.set(K.CHECKPOINT_RESUME, "auto", src)
        out.remarks.append(f"{src}: resume_from_checkpoint {'unset' if 'resume_from_checkpoint' not in raw else 'latest'}"
                           ": SimpleTuner resumes the latest checkpoint, or starts fresh when there is none "
                           "(field_registry/sections/model.py:284, trainer.py:5031): imported as checkpoint.resume = 'auto'")
    else:
        out.set(K.CHECKPOINT_RESUME, value, src)
    if "validation_steps" in raw:
        out.remarks.append(f"{src}: validation_steps = {raw['validation_steps']!r} is SimpleTuner's image-sampling "
                           "interval (validation_step_interval), not an evaluation loss: not imported")


def _lora(raw: dict[str, Any], src: str, out: Imported, problems: list[str]) -> None:
    kind = str(out.values.get(K.MODEL_TYPE, "full")).lower()
    if kind not in ("full", "lora"):
        problems.append(f"model_type = {kind!r}: tuner trains 'full' or 'lora'")
        return
    lora_type = str(raw.get("lora_type", "standard")).lower()
    if kind == "lora" and lora_type == "lycoris":
        config = raw.get("lycoris_config")
        problems.append(f"lora_type = 'lycoris'{f' (lycoris_config {config!r})' if config else ''}: SimpleTuner "
                        "trains a LyCORIS adapter (LoKr, LoHa, ...); tuner trains PEFT LoRA only; set lora_type = "
                        "'standard' to train a LoRA")
    elif lora_type not in ("standard", "lycoris"):
        problems.append(f"lora_type = {raw['lora_type']!r}: tuner trains PEFT LoRA ('standard') only")
    if kind != "lora":
        return
    for path, key, value, where in D.LORA_DEFAULTS:
        if key not in raw:
            out.default(path, value, src, f"{key} unset: SimpleTuner's default {value!r} ({where}) imported as {path}")
    alpha = raw.get("lora_alpha")
    rank = out.values.get(K.MODEL_LORA_RANK)
    if alpha is None:
        out.set(K.MODEL_LORA_ALPHA, rank, src)
        out.remarks.append(f"{src}: lora_alpha unset: SimpleTuner uses the rank, {rank} "
                           "(simpletuner/helpers/models/common.py:1092), imported as model.lora_alpha")
    else:
        out.set(K.MODEL_LORA_ALPHA, alpha, src)
    targets = raw.get("peft_lora_target_modules")
    if isinstance(targets, list) and targets:
        out.set(K.MODEL_LORA_TARGET_MODULES, targets, src)
    else:
        out.remarks.append(f"{src}: LoRA target layers: SimpleTuner's default for model_family "
                           f"{raw.get('model_family')!r} (its model class's get_lora_target_layers, "
                           "simpletuner/helpers/models/common.py:977), not carried: tuner targets its own default "
                           "layers for model.family; set model.lora_target_modules to choose them"
                           + (f" (peft_lora_target_modules = {targets!r})" if targets else ""))


def _data(raw: dict[str, Any], src: str, out: Imported) -> None:
    backends = raw.get("data_backend_config")
    said = f"data_backend_config = {backends!r}" if backends else "no data_backend_config"
    out.remarks.append(f"{src}: {said}: SimpleTuner's datasets are described by its data-backend file, which tuner "
                       "does not import; data.path stays tuner's built-in sample data until you set data.path")


def finish(raw: dict[str, Any], src: str, out: Imported) -> None:
    """Once every file is read: what depends on DeepSpeed or FSDP being on (an accelerate YAML given
    beside the SimpleTuner file may turn them on): clipping and the weight decay."""
    ds = str(out.values.get(K.DEEPSPEED_ENABLED, "")).lower() in ("true", "1") or K.DEEPSPEED_CONFIG in out.values
    fsdp = str(out.values.get(K.FSDP_ENABLED, "")).lower() in ("true", "1")
    _clipping(raw, src, out, ds, fsdp)
    _weight_decay(raw, src, out, ds)


def _clipping(raw: dict[str, Any], src: str, out: Imported, ds: bool, fsdp: bool) -> None:
    """SimpleTuner clips each value at 2.0 by default (field_registry/sections/optimizer.py:234, :272), except
    (simpletuner/helpers/training/trainer.py:7138-7212): never for prodigy and optimi-stableadamw,
    not at all under FSDP with value clipping, and under DeepSpeed the engine clips the norm."""
    method = str(raw.get("grad_clip_method", "value")).strip().lower()
    optimizer = str(raw.get("optimizer", "adamw_bf16")).strip().lower()
    if optimizer in ("prodigy", "optimi-stableadamw"):
        out.set(K.TRAINING_MAX_GRAD_NORM, 0.0, src)
        out.remarks.append(f"{src}: SimpleTuner does not clip gradients for optimizer {optimizer} (trainer.py:7140); "
                           "imported as training.max_grad_norm = 0")
    elif ds:
        if method == "value":
            out.set(K.TRAINING_CLIP_METHOD, "norm", src)
            out.remarks.append(f"{src}: grad_clip_method {method!r}: under DeepSpeed SimpleTuner leaves clipping to the "
                               "engine, which clips the global norm (trainer.py:7206-7208, deepspeed gradient_clipping); "
                               "imported as training.clip_method = 'norm'")
    elif fsdp and method == "value":
        out.set(K.TRAINING_MAX_GRAD_NORM, 0.0, src)
        out.remarks.append(f"{src}: grad_clip_method 'value' under FSDP: SimpleTuner skips clipping "
                           "(trainer.py:7192-7195); imported as training.max_grad_norm = 0 (no clipping)")
    else:
        out.default(K.TRAINING_MAX_GRAD_NORM, 2.0, src, "max_grad_norm unset: SimpleTuner's default 2.0 "
                    "(field_registry/sections/optimizer.py:234) imported")
        out.default(K.TRAINING_CLIP_METHOD, "value", src, "grad_clip_method unset: SimpleTuner clips each gradient "
                    "value by default (field_registry/sections/optimizer.py:272); imported as 'value'")


def _weight_decay(raw: dict[str, Any], src: str, out: Imported, ds: bool) -> None:
    if ds:
        value, where = raw.get("adam_weight_decay"), "the file's adam_weight_decay"
        if value is None:
            value, where = D.ADAM_WEIGHT_DECAY[0], f"adam_weight_decay's default, {D.ADAM_WEIGHT_DECAY[1]}"
        out.default(K.TRAINING_WEIGHT_DECAY, value, src, f"weight decay {value} ({where}): SimpleTuner passes "
                    "adam_weight_decay to DeepSpeed's optimizer (simpletuner/helpers/training/trainer.py:4139)")
        if raw.get("optimizer_config"):
            out.remarks.append(f"{src}: optimizer_config {raw['optimizer_config']!r}: not used with DeepSpeed's "
                               "optimizer (optimizer_param.py:1185-1191); not carried")
        return
    optimizer = str(raw.get("optimizer", "adamw_bf16")).strip().lower()
    if "adam_weight_decay" in raw:
        out.remarks.append(f"{src}: adam_weight_decay = {raw['adam_weight_decay']!r} is used by SimpleTuner only with "
                           "DeepSpeed's optimizer (trainer.py:4139); its own optimizers take the decay from their "
                           "defaults and optimizer_config (optimizer_param.py:912-925), as imported here")
    match = re.search(r"(?:^|,)\s*weight_decay\s*=\s*([^,]+)", str(raw.get("optimizer_config") or ""))
    try:
        decay = float(match.group(1)) if match else None
    except ValueError:
        decay = None  # not a number: SimpleTuner would fail too; the default below is named
    if decay is not None:
        out.set(K.TRAINING_WEIGHT_DECAY, decay, src)
    elif optimizer in D.OPTIMIZER_WEIGHT_DECAY:
        value, line = D.OPTIMIZER_WEIGHT_DECAY[optimizer]
        out.default(K.TRAINING_WEIGHT_DECAY, value, src, f"weight decay: {optimizer}'s own default {value} "
                    f"({D.OPTIMIZERS}:{line}) imported as training.weight_decay")
    else:
        out.remarks.append(f"{src}: weight decay of SimpleTuner's optimizer {optimizer!r} is not known to tuner; "
                           "training.weight_decay stays tuner's default (0.0): set it")
    fsdp2 = str(out.values.get(K.FSDP_ENABLED, "")).lower() in ("true", "1") and str(
        out.values.get(K.FSDP_VERSION, 2)) == "2"
    if fsdp2 and (optimizer.startswith(("optimi-", "bnb-")) or optimizer == "soap"):
        out.remarks.append(f"{src}: optimizer {optimizer!r} under FSDP2: SimpleTuner trains adamw_schedulefree "
                           f"instead ({D.OPTIMIZERS}:453-455, 1169-1184); tuner trains {optimizer!r} as imported")
    if optimizer == "adamw_schedulefree":
        out.remarks.append(f"{src}: optimizer adamw_schedulefree is schedule-free AdamW ({D.OPTIMIZERS}:250); tuner "
                           "trains plain AdamW with training.lr_scheduler")
    if optimizer == "adamw_bf16":
        out.remarks.append(f"{src}: optimizer adamw_bf16 (AdamW with bf16 state and stochastic rounding, eps 1e-6: "
                           f"{D.OPTIMIZERS}:191-198) trains as torch AdamW (fp32 state, eps 1e-8) in tuner")
    extra = re.sub(r"(?:^|,)\s*weight_decay\s*=\s*[^,]+", "", str(raw.get("optimizer_config") or "")).strip(", ")
    if extra:
        out.remarks.append(f"{src}: optimizer_config {extra!r}: optimizer arguments tuner has no setting for; "
                           "not carried")
