"""FSDP in HF Trainer arguments: the `fsdp` options and `fsdp_config` as the Trainer builds its
plugin from them (`TrainingArguments(...).fsdp_plugin_args`, computed by `tuner.runtime.hf_args`),
mapped onto tuner's FSDP settings; without transformers, the file's values as written."""

from __future__ import annotations

from typing import Any

from ..keys import paths as K
from .base import Imported

#: Where `upstream` hands on the FSDP plugin arguments the Trainer builds from the file.
PLUGIN = "<the Trainer's FSDP plugin arguments>"
FSDP_OPTIONS = {"full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2", "no_shard", "offload", "auto_wrap"}


def _is_fsdp(value: Any) -> bool:
    words = value.split() if isinstance(value, str) else value if isinstance(value, list) else []
    return bool(words) and all(isinstance(w, str) and w in FSDP_OPTIONS for w in words)


def _fsdp(options: Any, config: dict[str, Any], src: str, out: Imported) -> None:
    """Without transformers: the file's fsdp options and fsdp_config as written (version 1 unless
    it says otherwise), transformers 4's defaults for the rest."""
    words = options.split() if isinstance(options, str) else list(options)
    cfg = {k.removeprefix("fsdp_"): v for k, v in config.items()} if isinstance(config, dict) else {}
    version = int(cfg.get("version", 1))
    strategy = next((w for w in words if w not in ("offload", "auto_wrap")), "full_shard")
    strategy = "hybrid_shard" if strategy == "hybrid_shard_zero2" else strategy
    classes = cfg.get("transformer_layer_cls_to_wrap")
    policy = ("TRANSFORMER_BASED_WRAP" if classes or "auto_wrap" in words else
              "SIZE_BASED_WRAP" if int(cfg.get("min_num_params", 0) or 0) > 0 else "NO_WRAP")
    plugin: dict[str, Any] = {"fsdp_version": version, "auto_wrap_policy": policy, "cpu_offload": "offload" in words,
                              "cpu_ram_efficient_loading": _bool(cfg.get("cpu_ram_efficient_loading", False)),
                              "state_dict_type": cfg.get("state_dict_type", "FULL_STATE_DICT")}
    if classes:
        plugin["transformer_cls_names_to_wrap"] = ",".join(classes) if isinstance(classes, list) else classes
    if policy == "SIZE_BASED_WRAP":
        plugin["min_num_params"] = int(cfg["min_num_params"])
    if "activation_checkpointing" in cfg:
        plugin["activation_checkpointing"] = _bool(cfg["activation_checkpointing"])
    if version == 1:
        plugin.update(reshard_after_forward=strategy, forward_prefetch=_bool(cfg.get("forward_prefetch", False)),
                      backward_prefetch=str(cfg.get("backward_prefetch", "NO_PREFETCH")).upper(),
                      use_orig_params=_bool(cfg.get("use_orig_params", True)),
                      sync_module_states=_bool(cfg.get("sync_module_states", True)))
    else:
        plugin["reshard_after_forward"] = _bool(cfg.get("reshard_after_forward", True))
    fsdp_from_plugin(plugin, cfg, src, out)


def fsdp_from_plugin(plugin: dict[str, Any], cfg: dict[str, Any], src: str, out: Imported) -> None:
    """The Trainer's FSDP plugin arguments (`TrainingArguments(...).fsdp_plugin_args`) -> tuner's
    FSDP settings; fsdp_config keys the plugin does not carry are listed as not imported."""
    out.set(K.FSDP_ENABLED, True, src)
    version = int(plugin.get("fsdp_version", 1))
    out.set(K.FSDP_VERSION, version, src)
    policy = plugin.get("auto_wrap_policy", "NO_WRAP")
    if policy == "TRANSFORMER_BASED_WRAP":
        out.set(K.FSDP_AUTO_WRAP_POLICY, "transformer", src)  # named classes, else the model's _no_split_modules
        if plugin.get("transformer_cls_names_to_wrap"):
            out.set(K.FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP, str(plugin["transformer_cls_names_to_wrap"]).split(","), src)
    elif policy == "SIZE_BASED_WRAP":
        out.set(K.FSDP_AUTO_WRAP_POLICY, "size", src)
        out.set(K.FSDP_MIN_NUM_PARAMS, int(plugin.get("min_num_params", 0)), src)
    else:
        out.set(K.FSDP_AUTO_WRAP_POLICY, "none", src)
    out.set(K.FSDP_OFFLOAD_PARAMS, bool(plugin.get("cpu_offload", False)), src)
    out.set(K.FSDP_CPU_RAM_EFFICIENT_LOADING, bool(plugin.get("cpu_ram_efficient_loading", False)), src)
    out.set(K.FSDP_ACTIVATION_CHECKPOINTING, bool(plugin.get("activation_checkpointing", False)), src)
    out.set(K.CHECKPOINT_STATE_DICT_TYPE, str(plugin.get("state_dict_type", "FULL_STATE_DICT")), src)
    reshard = plugin.get("reshard_after_forward", True)
    if version == 1:
        strategy = str(reshard).lower()
        strategy = "hybrid_shard" if strategy == "hybrid_shard_zero2" else strategy
        out.set(K.FSDP_SHARDING_STRATEGY, strategy, src)
        out.set(K.FSDP_RESHARD_AFTER_FORWARD, strategy in ("full_shard", "hybrid_shard"), src)
        for key in ("use_orig_params", "sync_module_states", "forward_prefetch"):
            out.set(f"fsdp.{key}", bool(plugin.get(key, False)), src)
        out.set(K.FSDP_BACKWARD_PREFETCH, str(plugin.get("backward_prefetch", "NO_PREFETCH")).upper(), src)
    else:
        out.set(K.FSDP_RESHARD_AFTER_FORWARD, bool(reshard), src)
    done = {"version", "transformer_layer_cls_to_wrap", "min_num_params", "use_orig_params", "sync_module_states",
            "forward_prefetch", "cpu_ram_efficient_loading", "activation_checkpointing", "backward_prefetch",
            "reshard_after_forward", "state_dict_type", "auto_wrap_policy", "cpu_offload"}
    for key, value in cfg.items():
        if key not in done:
            out.unmodelled[f"fsdp_config.{key}"] = value
    if version == 2:
        ignored = sorted(k for k in ("use_orig_params", "sync_module_states", "forward_prefetch", "backward_prefetch")
                         if k in cfg)
        if ignored:
            out.remarks.append(f"{src}: fsdp_config {', '.join(ignored)}: FSDP1 options the Trainer does not pass to "
                               "FSDP2 (its fsdp_config version is 2): not imported")


def _bool(value: Any) -> Any:
    return value.strip().lower() in ("true", "1", "yes") if isinstance(value, str) else value
