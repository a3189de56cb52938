"""Writing a transformers model shard by shard from a checkpoint `Source` (`export_sources.py`),
the same files ``save_pretrained`` writes from the full state, without ever holding the model.

The model is built on the meta device (with its PEFT LoRA layers when the run trained LoRA);
transformers' own steps decide what is written: the keys `save_pretrained` drops
(``_keys_to_ignore_on_save``, tied weights), its dtype in ``config.json``, and huggingface_hub's
``split_torch_state_dict_into_shards`` (transformers' shard names and index). Then, one shard at
a time: read the tensors the shard needs, load them into the meta model (``assign=True``),
merge each LoRA layer whose weight is in the shard with PEFT's own ``merge()``, write the shard
with safetensors, and put the tensors back on the meta device. A model whose save would convert
weights (``revert_weight_conversion`` renames or fuses them) is not streamed: the caller falls
back to the full state.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from .export_sources import Source

#: The largest output shard (``save_pretrained``'s ``max_shard_size``) unless `--max-shard-size` says.
DEFAULT_MAX_SHARD = "5GB"
_PEFT_PREFIX = "base_model.model."


def output_key(key: str) -> str | None:
    """The merged model's key of a (PEFT) model's key; None for an adapter's own tensors."""
    if ".lora_" in key:
        return None
    return key.removeprefix(_PEFT_PREFIX).replace(".base_layer.", ".")


def _lora_layers(model: Any) -> dict[str, tuple[Any, set[str]]]:
    """Output key of each LoRA layer's base weight -> (the layer, the model keys of its adapter
    tensors); empty for a plain model."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return {}
    return {output_key(f"{name}.base_layer.weight") or "": (mod, {f"{name}.{k}" for k in mod.state_dict() if ".lora_" in f".{k}"})
            for name, mod in model.named_modules() if isinstance(mod, LoraLayer)}


def _meta_like(model: Any, keys: list[str], shapes: dict) -> None:
    import torch

    model.load_state_dict({k: torch.empty(shapes[k][0], dtype=shapes[k][1], device="meta") for k in keys},
                          strict=False, assign=True)


def plan(model: Any, source: Source, max_shard_size: int | str) -> tuple[Any, Any, dict[str, str]] | None:
    """(the merged model on meta, huggingface_hub's split, output key -> model key), or None when
    transformers' save would convert weights (not streamable). Raises the family's mismatch error
    when the checkpoint does not fit the model."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    from .families.base import FamilyError

    keys = list(model.state_dict())
    missing = [k for k in keys if k not in source.shapes and "rotary_emb" not in k]
    unexpected = [k for k in source.shapes if k not in keys]
    if unexpected or missing:
        raise FamilyError(f"checkpoint does not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
    _meta_like(model, [k for k in keys if k in source.shapes], source.shapes)
    merged = copy.deepcopy(model)
    if hasattr(merged, "unload"):
        merged = merged.unload()
    to_model = {out: k for k in keys if (out := output_key(k)) is not None}
    state = merged.state_dict()
    if set(state) != set(to_model):
        return None
    for ignore in merged._keys_to_ignore_on_save or ():
        state.pop(ignore, None)
    kept = remove_tied_weights_from_state_dict(dict(state), merged)
    reverted = revert_weight_conversion(merged, dict(kept))
    if set(reverted) != set(kept) or any(reverted[k] is not kept[k] for k in kept):
        return None
    split = split_torch_state_dict_into_shards(kept, filename_pattern="model{suffix}.safetensors",
                                               max_shard_size=max_shard_size)
    return merged, split, to_model


def write_config(merged: Any, out_dir: Path) -> None:
    """config.json and generation_config.json as ``save_pretrained`` writes them."""
    merged.config.dtype = str(merged.dtype).split(".")[1]
    merged.config.architectures = [merged.__class__.__name__.removeprefix("FSDP")]
    merged.config.save_pretrained(str(out_dir))
    if merged.can_generate():
        merged.generation_config.save_pretrained(str(out_dir))


def write_adapter(model: Any, source: Source, out_dir: Path) -> None:
    """The unmerged PEFT adapter (its tensors are small: read at once)."""
    lora = [k for k in model.state_dict() if output_key(k) is None]
    model.load_state_dict(source.load(lora), strict=False, assign=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)


def _tensor(model: Any, key: str) -> Any:
    try:
        return model.get_parameter(key)
    except AttributeError:
        return model.get_buffer(key)


def give_freed_memory_back() -> None:
    """Make glibc serve every allocation of 1 MiB or more with its own mapping, returned to the
    system when freed (``mallopt(M_MMAP_THRESHOLD)``). By default glibc raises that threshold as
    large blocks are freed and then keeps freed tensors in its heap, so a shard's tensors, freed,
    would still count in the resident set while the next shard is read (measured: 1.40 x a shard
    instead of 1.15 for an FSDP2 checkpoint, bench/export_memory.py). No-op without glibc."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def write_streamed(model: Any, source: Source, out_dir: Path, max_shard_size: int | str = DEFAULT_MAX_SHARD) -> bool:
    """Write `model`'s weights from `source` into `out_dir` shard by shard (plus config and, for
    a PEFT model, ``adapter/``); False (nothing written) when it cannot be streamed."""
    from safetensors.torch import save_file

    give_freed_memory_back()
    planned = plan(model, source, max_shard_size)
    if planned is None:
        return False
    merged, split, to_model = planned
    out_dir.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "peft_config"):
        write_adapter(model, source, out_dir / "adapter")
    write_config(merged, out_dir)
    layers = _lora_layers(model)
    for filename, keys in split.filename_to_tensors.items():
        wanted = {to_model[k] for k in keys}
        for k in keys:
            if k in layers:  # the adapter tensors its merge needs
                wanted |= layers[k][1]
        loaded = {k: v.detach().to("cpu").contiguous() for k, v in source.load(sorted(wanted)).items()}
        model.load_state_dict(loaded, strict=False, assign=True)
        for k in keys:
            if k in layers:
                layers[k][0].merge()  # PEFT's own merge, as merge_and_unload calls it
        shard = {k: _tensor(model, to_model[k]).detach().contiguous() for k in keys}
        save_file(shard, str(out_dir / filename), metadata={"format": "pt"})
        del shard
        _meta_like(model, sorted(loaded), source.shapes)
        del loaded
        source.release()
    if split.is_sharded:
        index = {"metadata": {"total_parameters": merged.num_parameters(), **split.metadata},
                 "weight_map": split.tensor_to_filename}
        (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n",
                                                              encoding="utf-8")
    return True

