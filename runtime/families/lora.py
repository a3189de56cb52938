"""The one LoRA builder every family calls (peft), driven by the ``model.lora_*`` settings,
and the 4-bit base of QLoRA (``model.base_precision = "nf4-bnb"``, bitsandbytes).

Targets, as people write them (``model.lora_target_modules``):

* empty: the family's default (attention projections);
* ``"all-linear"``: every linear layer but the output head — PEFT's own spelling for
  transformers models; for other modules (diffusers denoisers) tuner lists their linear
  layers itself;
* module names (``["q_proj", "v_proj"]``), as PEFT matches them (name suffixes).

Names that match nothing are refused naming the key and the model's linear layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import FamilyError

ALL_LINEAR = "all-linear"


def _short(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[-2:]) if parts[-1].isdigit() and len(parts) > 1 else parts[-1]


def linear_names(module: Any) -> list[str]:
    """Short names (``to_q``, ``to_out.0``) of the ``torch.nn.Linear`` layers in `module`, sorted, once each."""
    import torch

    return sorted({_short(n) for n, sub in module.named_modules() if isinstance(sub, torch.nn.Linear)})


def _all_linear(module: Any) -> list[str]:
    """Full names of every ``torch.nn.Linear`` in `module` (exact PEFT targets)."""
    import torch

    return [n for n, sub in module.named_modules() if isinstance(sub, torch.nn.Linear)]


def _targets(module: Any, m: Any, default_targets: Sequence[str], only_present: bool) -> str | list[str]:
    targets = list(m.lora_target_modules or ())
    if targets == [ALL_LINEAR]:
        try:
            from transformers import PreTrainedModel

            if isinstance(module, PreTrainedModel):
                return ALL_LINEAR  # PEFT's own: every linear layer but the output head
        except ImportError:
            pass
        return _all_linear(module)
    if targets:
        return targets
    targets = list(default_targets)
    if only_present:
        names = linear_names(module)
        targets = [t for t in default_targets if t in names]
        if not targets:
            raise FamilyError(f"no LoRA target modules found in the model; set model.lora_target_modules "
                              f"(\"all-linear\", or names of its linear layers: {names[:12]})")
    return targets


def _qlora(model_settings: Any) -> bool:
    return getattr(model_settings, "base_precision", "no_change") == "nf4-bnb"


def quantization_kwargs(model_settings: Any) -> dict[str, Any]:
    """``from_pretrained`` arguments for a 4-bit (NF4) base when ``model.base_precision`` is
    ``nf4-bnb`` (QLoRA); none otherwise. Refused without CUDA or bitsandbytes (the compiler and `tuner run`
    refuse both earlier; this is the rank's own check)."""
    if not _qlora(model_settings):
        return {}
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        raise FamilyError("model.base_precision = \"nf4-bnb\" needs CUDA GPUs (bitsandbytes); "
                          "set it to \"no_change\" for plain LoRA")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise FamilyError("model.base_precision = \"nf4-bnb\" needs bitsandbytes: pip install bitsandbytes")
    from transformers import BitsAndBytesConfig

    # The storage dtype matches the compute dtype so that FSDP can shard the packed weights.
    return {"quantization_config": BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_quant_storage=torch.bfloat16)}


def apply_lora(module: Any, model_settings: Any, default_targets: Sequence[str], *,
               task_type: str | None = None, only_present: bool = False) -> Any:
    """`module` wrapped with peft LoRA adapters; only the adapters stay trainable.

    Targets: see the module doc. ``only_present`` keeps the defaults that name a linear
    layer of `module` (for families whose defaults cover several architectures) and refuses
    when none does.
    """
    from peft import LoraConfig, get_peft_model

    m = model_settings
    targets = _targets(module, m, default_targets, only_present)
    if _qlora(m) and getattr(module, "is_loaded_in_4bit", False):
        from peft import prepare_model_for_kbit_training

        module = prepare_model_for_kbit_training(module, use_gradient_checkpointing=False)
    extra = {"task_type": task_type} if task_type else {}
    cfg = LoraConfig(r=m.lora_rank, lora_alpha=m.lora_alpha, lora_dropout=m.lora_dropout, target_modules=targets,
                     **extra)
    try:
        return get_peft_model(module, cfg)
    except ValueError as exc:
        if "not found in the base model" not in str(exc) and "Target modules" not in str(exc):
            raise
        raise FamilyError(f"model.lora_target_modules = {list(m.lora_target_modules or default_targets)} matches no "
                          f"module of the model; use \"all-linear\", or names of its linear layers: "
                          f"{linear_names(module)[:16]}") from None
