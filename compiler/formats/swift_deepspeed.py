"""ms-swift's built-in DeepSpeed configs, the values of its `swift/config/{name}.json` files
(modelscope/ms-swift @ 67ae6076ae44, Apache-2.0), which `--deepspeed zero2` and the other names
load (`SftArguments._init_deepspeed`, swift/arguments/sft_args.py; ms-swift 1.x's
`deepspeed_config_path: default-zero2` loaded the same files). tests/compiler/test_llm_fidelity.py
compares this table with copies of the JSON files themselves."""

from __future__ import annotations

import copy
from typing import Any

_FP16 = {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16, "hysteresis": 2,
         "min_loss_scale": 1}
_TOP = {"gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False}
_BUCKETS = {"allgather_partitions": True, "allgather_bucket_size": 2e8, "overlap_comm": False, "reduce_scatter": True,
            "reduce_bucket_size": 2e8, "contiguous_gradients": True}
_STAGE3 = {"overlap_comm": False, "contiguous_gradients": True, "sub_group_size": 1e9, "reduce_bucket_size": "auto"}
_STAGE3_TAIL = {"stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
                "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
                "stage3_gather_16bit_weights_on_model_save": True}


def _offload(device: str) -> dict[str, Any]:
    return {"device": device, "pin_memory": True}


_ZERO: dict[str, dict[str, Any]] = {
    "zero0": {"stage": 0, **_BUCKETS},
    "zero1": {"stage": 1, "offload_optimizer": _offload("none"), **_BUCKETS},
    "zero2": {"stage": 2, "offload_optimizer": _offload("none"), **_BUCKETS},
    "zero2_offload": {"stage": 2, "offload_optimizer": _offload("cpu"), **_BUCKETS},
    "zero3": {"stage": 3, "offload_optimizer": _offload("none"), "offload_param": _offload("none"), **_STAGE3,
              "zero_quantized_weights": False, "zero_quantized_gradients": False, **_STAGE3_TAIL},
    "zero3_offload": {"stage": 3, "offload_optimizer": _offload("cpu"), "offload_param": _offload("cpu"), **_STAGE3,
                      **_STAGE3_TAIL},
}
NAMES = tuple(_ZERO)


def config(name: str) -> dict[str, Any]:
    """The DeepSpeed config ms-swift loads for one of its names (a fresh copy)."""
    return copy.deepcopy({"fp16": _FP16, "bf16": {"enabled": "auto"}, "zero_optimization": _ZERO[name], **_TOP})
