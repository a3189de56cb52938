"""The one LoRA builder every family calls (peft), driven by the ``model.lora_*`` settings."""

from __future__ import annotations

from typing import Any, Sequence

from .base import FamilyError


def apply_lora(module: Any, model_settings: Any, default_targets: Sequence[str], *,
               task_type: str | None = None, only_present: bool = False) -> Any:
    """`module` wrapped with peft LoRA adapters; only the adapters stay trainable.

    Targets are ``model.lora_target_modules`` or, when that is empty, `default_targets`.
    ``only_present`` keeps the defaults that name a linear layer of `module` (for families
    whose defaults cover several architectures) and refuses when none does.
    """
    from peft import LoraConfig, get_peft_model

    m = model_settings
    targets = list(m.lora_target_modules or ())
    if not targets:
        targets = list(default_targets)
        if only_present:
            import torch

            names = {n.rsplit(".", 1)[-1] for n, sub in module.named_modules() if isinstance(sub, torch.nn.Linear)}
            targets = [t for t in default_targets if t in names]
            if not targets:
                raise FamilyError(f"no LoRA target modules found in the model; set model.lora_target_modules "
                                  f"(linear layers: {sorted(names)[:12]})")
    extra = {"task_type": task_type} if task_type else {}
    cfg = LoraConfig(r=m.lora_rank, lora_alpha=m.lora_alpha, lora_dropout=m.lora_dropout, target_modules=targets,
                     **extra)
    return get_peft_model(module, cfg)
