"""Rules for the keys only `tuner run` reads: the polynomial schedule's end (``training.lr_end``), trackers
(``logging.*``) and LoRA targets / QLoRA
(``model.lora_target_modules``, ``model.base_precision = "nf4-bnb"``). Whether a tracker package or
bitsandbytes is installed is checked by `tuner run` before any rank starts
(runtime/extras.py); the compiler may run where neither is."""

from __future__ import annotations

from ..diagnostics import Diagnostics
from ..keys import paths as K
from ..keys.sections.tracking import TRACKERS
from ..keys.settings import Settings

#: The base precision `tuner run` loads for QLoRA (bitsandbytes 4-bit NF4).
QLORA_PRECISION = "nf4-bnb"


#: Built-in diffusion models and flavours whose scheduler is flow matching (SD3, Flux, DiT) or DDPM.
FLOW_MATCHING = ("tiny-sd3", "tiny-dit", "sd3", "flux", "transformer", "dit")
DDPM = ("tiny-unet", "unet", "sdxl")


def diffusion_scheduler(s: Settings) -> str:
    """"flow", "ddpm" or "" (a model folder: its scheduler config decides, at run time)."""
    path = s.model.path.strip()
    name = path.split(":", 1)[1].strip() if path.startswith("builtin:") else ""
    if not name and path != "builtin":
        return ""
    name = name or s.model.flavour.strip().lower() or "tiny-unet"
    return "flow" if name in FLOW_MATCHING else "ddpm" if name in DDPM else ""


def check_diffusion_objective(s: Settings, diags: Diagnostics) -> None:
    """Min-SNR-gamma on a flow-matching model, flow settings on a DDPM one: refused with why."""
    kind = diffusion_scheduler(s)
    t = s.training
    if kind == "flow" and t.snr_gamma > 0:
        diags.error(K.TRAINING_SNR_GAMMA, "min-SNR-gamma weights epsilon / v-prediction losses by the noise level's "
                    "signal-to-noise ratio; this model trains by flow matching (a velocity target), where that "
                    "weighting does not apply", "remove training.snr_gamma (for flow matching, shape the timesteps "
                    "with training.timestep_sampling and training.flow_shift)")
    if kind == "ddpm":
        for key, on in ((K.TRAINING_FLOW_SHIFT, t.flow_shift != 1.0), (K.TRAINING_FLOW_AUTO_SHIFT, t.flow_auto_shift),
                        (K.TRAINING_TIMESTEP_SAMPLING, t.timestep_sampling != "uniform")):
            if on:
                diags.error(key, "this model's scheduler is DDPM (discrete timesteps); the key shapes flow-matching "
                            "sigmas only", f"remove {key}, or train a flow-matching model (SD3, Flux)")


def check_runtime_keys(s: Settings, platform: str, diags: Diagnostics) -> None:
    if s.model.trained_family == "diffusion":
        check_diffusion_objective(s, diags)
    t = s.training
    if t.lr_scheduler == "polynomial" and t.lr_end >= t.learning_rate:
        # transformers' get_polynomial_decay_schedule_with_warmup raises this at the first step (so does SimpleTuner's)
        diags.error(K.TRAINING_LR_END, f"the polynomial schedule decays from training.learning_rate ({t.learning_rate:g}) "
                    f"to lr_end ({t.lr_end:g}); lr_end must be smaller", "set training.lr_end below the learning rate")
    unknown = [n for n in s.logging.log_with if n not in (*TRACKERS, "all")]
    if unknown:
        diags.error(K.LOGGING_LOG_WITH, f"unknown tracker(s) {', '.join(map(repr, unknown))}",
                    f"use any of {', '.join(TRACKERS)}, or all (every installed one)")
    targets = s.model.lora_target_modules
    if "all-linear" in targets and len(targets) > 1:
        diags.error(K.MODEL_LORA_TARGET_MODULES, "\"all-linear\" already names every linear layer; it cannot be "
                    "combined with module names", "write lora_target_modules = \"all-linear\", or list module names only")
    if s.model.base_precision == QLORA_PRECISION:
        if s.model.type != "lora":
            diags.error(K.MODEL_BASE_PRECISION, "a 4-bit base model cannot be trained in full; QLoRA trains LoRA "
                        "adapters on it", "set model.type = \"lora\", or model.base_precision = \"no_change\"")
        if platform != "cuda":
            diags.error(K.MODEL_BASE_PRECISION, f"4-bit loading (bitsandbytes) needs CUDA GPUs; the target platform is "
                        f"{platform}", "set model.base_precision = \"no_change\" (plain LoRA), or hardware.platform = \"cuda\" "
                        "when compiling for a CUDA machine")
        if s.model.path.strip().startswith("builtin"):
            diags.error(K.MODEL_BASE_PRECISION, "a built-in model is built, not loaded: there is no 4-bit base to load",
                        "set model.path to a local model folder, or model.base_precision = \"no_change\"")
        if s.model.trained_family != "causal_lm":
            diags.error(K.MODEL_BASE_PRECISION, f"tuner run loads a 4-bit base for causal_lm models only, not "
                        f"{s.model.family}", "set model.base_precision = \"no_change\"")
