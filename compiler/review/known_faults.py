"""Known silent faults of a plan, named at compile time (`tuner check` names the rest in its
rehearsal). Each is a combination people ran into in 2025-26 threads, and docs/check.md lists
it with the thread:

* `VERSION_DEFECTS`: installed library versions with a known defect for this plan (the
  compile machine's versions, the manifest's ``versions``; `tuner check` compares them with
  the machines that train);
* LoRA under FSDP2 on a model that fits each GPU whole under DDP (several times slower for
  the same memory);
* FSDP2 CPU offload with an optimizer that steps inside backward (gradient hooks);
* a 4-bit base whose storage dtype differs from the compute dtype.

Every message starts with `KNOWN`: `tuner check` reports these diagnostics of the build
(the manifest keeps warnings) as faults.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import Diagnostics
from ..keys import paths as K
from ..keys.settings import Settings
from ..memory.report import Estimate, fits
from ..plan.plan import Plan
from ..plan.rules_runtime import QLORA_PRECISION
from ..plan.strategy import Strategy

KNOWN = "known fault: "


@dataclass(frozen=True)
class VersionDefect:
    package: str
    first: tuple[int, ...]  # first affected release
    fixed: tuple[int, ...]  # first release with the fix
    applies: str  # which plans: "fsdp2+lora+full-save"
    key: str
    defect: str
    fix: str
    thread: str


VERSION_DEFECTS = (
    VersionDefect(
        "accelerate", (1, 7), (1, 15), "fsdp2+lora+full-save", K.CHECKPOINT_STATE_DICT_TYPE,
        "saving a PEFT model under FSDP2 with a full state dict (adapter_only) writes only rank 0's slice of each "
        "adapter tensor: a resume or export restores (N-1)/N of the adapters to their initial values",
        "upgrade accelerate to 1.15 or later, or set checkpoint.state_dict_type = \"sharded\"",
        "huggingface/accelerate#4206 (2026-09)"),
)


OFFLOAD_HOOKS_FIX = "set training.optimizer_in_backward = false (step after backward), or fsdp.offload_params = false"
LORA_DDP_FIX = ("set fsdp.enabled = false (DDP keeps the whole frozen base on each GPU and only all-reduces the "
                "adapters' gradients)")
QUANT_FIX = "set training.mixed_precision = \"bf16\""
#: key -> the fix (`tuner check` reads the warnings back from the manifest, which keeps no fix).
FIXES = {**{d.key: d.fix for d in VERSION_DEFECTS}, K.TRAINING_OPTIMIZER_IN_BACKWARD: OFFLOAD_HOOKS_FIX,
         K.FSDP_ENABLED: LORA_DDP_FIX, K.TRAINING_MIXED_PRECISION: QUANT_FIX}


def _version(text: str) -> tuple[int, ...] | None:
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) if parts else None


def _applies(what: str, s: Settings, plan: Plan) -> bool:
    if what == "fsdp2+lora+full-save":
        return plan.strategy == Strategy.FSDP2 and s.model.type == "lora" and s.checkpoint.state_dict_type == "full"
    return False


def check(s: Settings, plan: Plan, diags: Diagnostics, versions: dict[str, str], est: Estimate | None) -> None:
    for d in VERSION_DEFECTS:
        have = _version(versions.get(d.package, ""))
        if have is not None and d.first <= have < d.fixed and _applies(d.applies, s, plan):
            diags.warning(d.key, f"{KNOWN}{d.package} {versions[d.package]}: {d.defect} ({d.thread})", d.fix)
    _lora_fsdp2_fits_ddp(s, plan, diags, est)
    if plan.strategy == Strategy.FSDP2 and s.fsdp.offload_params and s.training.optimizer_in_backward:
        diags.error(K.TRAINING_OPTIMIZER_IN_BACKWARD,
                    f"{KNOWN}an optimizer that steps inside backward (gradient hooks) under FSDP2 CPU offload steps "
                    "on parameters and gradients FSDP2 has moved to the CPU: the loss is NaN from step 2 "
                    "(meta-pytorch/torchtune#2825, 2025-06)", OFFLOAD_HOOKS_FIX)
    _quant_storage(s, plan, diags)


def _lora_fsdp2_fits_ddp(s: Settings, plan: Plan, diags: Diagnostics, est: Estimate | None) -> None:
    if plan.strategy != Strategy.FSDP2 or s.model.type != "lora" or est is None or plan.world_size < 2:
        return
    ddp = est.row("ddp")
    if ddp is None or ddp.fits_gpu is not True or fits(ddp) is not True:
        return
    diags.warning(K.FSDP_ENABLED,
                  f"{KNOWN}LoRA under FSDP2 on a model that fits each GPU whole under DDP (DDP needs about "
                  f"{ddp.per_gpu / 2**30:.1f} GiB per GPU): FSDP2 gathers the frozen base's weights in every forward "
                  "and backward to train a few MiB of adapters, several times slower than DDP "
                  "(pytorch/torchtitan#3035, 2026-04: sharding the adapters too, about 40% slower)", LORA_DDP_FIX)


#: training.mixed_precision -> the compute dtype of a 4-bit base (tuner run stores it as bfloat16).
COMPUTE = {"bf16": "bfloat16", "fp16": "float16", "no": "float32"}
QUANT_STORAGE = "bfloat16"  # runtime/families/lora.py: bnb_4bit_quant_storage


def _quant_storage(s: Settings, plan: Plan, diags: Diagnostics) -> None:
    if s.model.base_precision != QLORA_PRECISION or not plan.uses_fsdp:
        return
    compute = COMPUTE.get(s.training.mixed_precision, s.training.mixed_precision)
    if compute != QUANT_STORAGE:
        diags.error(K.TRAINING_MIXED_PRECISION,
                    f"{KNOWN}the 4-bit base is stored as {QUANT_STORAGE} (bnb_4bit_quant_storage, what FSDP shards) "
                    f"but training.mixed_precision = {s.training.mixed_precision!r} computes in {compute}: under FSDP "
                    "the packed weights and the compute dtype must agree (bitsandbytes' FSDP-QLoRA guide), otherwise "
                    "units mix dtypes or the loss collapses to 0 (MakazhanAlpamys/Soup#350, 2026-08)", QUANT_FIX)
