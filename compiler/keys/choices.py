"""The closed choices of the settings keys, as types: one `Literal` per vocabulary.

A key with a closed set of values is declared with one of these as its type
(`compiler/keys/sections/`); its choices are read from the type (`typing.get_args`, in
`compiler/keys/declare.py`'s `declared`), so the schema's ``enum``, the wizard's options and
the coercion of "BF16" -> "bf16" come from the same place as what mypy checks: comparing
``settings.checkpoint.state_dict_type == "fulll"`` is a type error (``strict_equality``).
The order of each `Literal`'s values is the order the schema lists them in.

Code that holds such a value in a variable of its own annotates it with the alias (``def
f(kind: StateDictType)``), so that the check follows the value.

No imports from the rest of tuner.
"""

from __future__ import annotations

from typing import Literal, cast, get_args

# -- model, data (sections/what.py) ------------------------------------------------------
ModelType = Literal["full", "lora"]
Pooling = Literal["mean", "cls", "last"]
DataFormat = Literal["auto", "text", "chat", "instruction", "pairs"]
#: The families `tuner run` trains. ``model.family`` itself is open (any other name compiles for
#: the person's own trainer), so the key is a ``str`` and these are its offered choices.
TrainedFamily = Literal["causal_lm", "embedding", "diffusion"]


def trained_family(name: str) -> TrainedFamily | None:
    """``model.family`` as one of the families `tuner run` trains, or None for another name;
    compare this (``trained_family(f) == "embedding"``), not the open string, so that mypy
    checks the word."""
    return cast(TrainedFamily, name) if name in get_args(TrainedFamily) else None

# -- sharding (sections/parallel.py) -----------------------------------------------------
FsdpVersion = Literal[1, 2]
ShardingStrategy = Literal["full_shard", "shard_grad_op", "no_shard", "hybrid_shard"]
BackwardPrefetch = Literal["BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"]
ZeroStage = Literal[0, 1, 2, 3]
OffloadDevice = Literal["none", "cpu", "nvme"]
DeepspeedScheduler = Literal["WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"]
CommStrategy = Literal["allgather", "alltoall"]
SpBackend = Literal["deepspeed"]

# -- the loop and its checkpoints (sections/loop.py) -------------------------------------
MixedPrecision = Literal["no", "fp16", "bf16"]
Optimizer = Literal["adamw", "adam", "sgd", "lion", "prodigy"]
LrScheduler = Literal["constant", "linear", "cosine", "constant_with_warmup", "polynomial", "cosine_with_restarts",
                      "inverse_sqrt", "cosine_with_min_lr", "warmup_stable_decay"]
ClipMethod = Literal["norm", "value"]
EmaDevice = Literal["cpu", "accelerator"]
TimestepSampling = Literal["uniform", "logit_normal"]
#: How FSDP saves model state (``checkpoint.state_dict_type``). A checkpoint's record holds a
#: wider vocabulary (`runtime/checkpoint.py`'s ``HeldState``).
StateDictType = Literal["sharded", "full"]

# -- where it runs (sections/where.py) ---------------------------------------------------
PlatformChoice = Literal["auto", "cuda", "rocm", "mps", "cpu"]
#: A resolved platform: what ``auto`` becomes (the plan's ``platform``).
Platform = Literal["cuda", "rocm", "mps", "cpu"]
RdzvBackend = Literal["static", "c10d"]
DynamoBackend = Literal["no", "eager", "aot_eager", "inductor", "aot_ts_nvfuser", "nvprims_nvfuser", "cudagraphs",
                        "ofi", "fx2trt", "onnxrt", "tensorrt", "aot_torchxla_trace_once", "torchxla_trace_once",
                        "tvm", "hpu_backend", "neuron"]
ClusterType = Literal["none", "slurm", "kubernetes"]
