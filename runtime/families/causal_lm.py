"""Causal language models (transformers): next-token loss on packed text.

Model: ``model.path`` is a local directory (``AutoModelForCausalLM.from_pretrained``) or
``builtin`` / ``builtin:NAME`` for a tiny configuration built locally (see `BUILTIN`).
Data: any local source Hugging Face `datasets` reads, in chat, instruction or raw-text format,
tokenised once (cached), loss-masked and packed with per-document position ids: see
runtime/data_sources/, which builds them from the tokenizer and packing `data_recipe` gives
(``builtin`` is the bundled corpus). Validation is ``data.validation_path`` or the last
``data.validation_split`` of the rows.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from ...compiler.read import builtin_models
from .base import Family, FamilyContext, FamilyError
from .lora import apply_lora, quantization_kwargs
from .recipes import TextData

#: The Llama config fields a built-in (compiler/read/builtin_models.py, the one registry) gives its
#: shape by; the rest (vocabulary, special tokens) comes from the bundled tokenizer.
#: Attention implementations whose masks follow packed position ids (transformers'
#: masking_utils.find_packed_sequence_indices, flash attention's varlen path).
PACKED_ATTENTION = ("sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention")
SHAPE_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")


def builtin_shape(name: str) -> dict[str, Any]:
    """The registry's shape of a causal-LM built-in; FamilyError for any other name."""
    entry = builtin_models.TINY_CONFIGS.get(name)
    if entry is None or entry["family"] != "causal_lm":
        choices = [n for n, e in builtin_models.TINY_CONFIGS.items() if e["family"] == "causal_lm"]
        raise FamilyError(f"unknown builtin model {name!r}; choose one of: {', '.join(choices)}")
    return {k: entry["config"][k] for k in SHAPE_FIELDS}


def bundled_dir() -> Path:
    return Path(str(resources.files("tuner.runtime") / "data"))


def _builtin_name(path: str) -> str | None:
    default = builtin_models.DEFAULT_BY_FAMILY["causal_lm"]
    if path == "builtin":
        return default
    if path.startswith("builtin:"):
        return path.split(":", 1)[1] or default
    return None


def _items_per_rank(labels):
    """Trained (shifted, not -100) tokens of this micro-batch summed over ranks, per rank."""
    import torch.distributed as dist

    n = (labels[:, 1:] != -100).sum().float()
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(n)
        n = n / dist.get_world_size()
    return n.clamp(min=1)


class CausalLMFamily(Family):
    name = "causal_lm"
    unit = "tok"
    streams_export = True

    def __init__(self, ctx: FamilyContext) -> None:
        super().__init__(ctx)
        self._tokenizer = None
        self._units = [0, 0, 0]

    # -- model ----------------------------------------------------------------------
    def _model_dir(self) -> Path | None:
        path = self.settings.model.path
        if _builtin_name(path) is not None:
            return None
        d = self.ctx.resolve(path)
        if not (d / "config.json").is_file():
            raise FamilyError(f"model.path {d} is not a model directory (no config.json); "
                              "use a local directory saved with save_pretrained, or 'builtin:tiny-llama'")
        return d

    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            d = self._model_dir()
            src = d if d is not None and (d / "tokenizer_config.json").is_file() else bundled_dir() / "tokenizer"
            self._tokenizer = AutoTokenizer.from_pretrained(str(src))
        return self._tokenizer

    def config(self):
        from transformers import AutoConfig, LlamaConfig

        d = self._model_dir()
        if d is not None:
            return AutoConfig.from_pretrained(str(d))
        shape = builtin_shape(_builtin_name(self.settings.model.path) or "")
        tok = self.tokenizer()
        return LlamaConfig(vocab_size=len(tok), max_position_embeddings=max(512, self.settings.data.seq_len),
                           tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                           pad_token_id=tok.pad_token_id, **shape)

    def build_model(self, meta: bool = False):
        import torch
        from transformers import AutoModelForCausalLM

        d = self._model_dir()
        if meta:
            with torch.device("meta"):
                return AutoModelForCausalLM.from_config(self.config())
        if d is not None:
            return AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32,
                                                        **quantization_kwargs(self.settings.model))  # QLoRA
        return AutoModelForCausalLM.from_config(self.config(), dtype=torch.float32)

    def prepare_model(self, model):
        s = self.settings
        model.config.use_cache = False
        if s.training.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if s.model.type == "lora":
            model = self._lora(model)
        return model

    def _lora(self, model):
        return apply_lora(model, self.settings.model, ["q_proj", "v_proj"], task_type="CAUSAL_LM")

    # -- data (runtime/data_sources/driver.py builds the rows and batches) ----------------
    def data_recipe(self) -> TextData:
        """The tokenizer, and packed rows when the attention follows packed position ids
        (transformers' packed-sequence masks, no attention mask); other attention
        implementations get padded batches."""
        packed = bool(self.settings.data.packing)
        if packed:
            impl = getattr(self.config(), "_attn_implementation", None) or "sdpa"
            packed = impl in PACKED_ATTENTION
        return TextData(tokenizer=self.tokenizer(), packed=packed)

    def batch_units(self, batch) -> int:
        real = int(batch["n_real"]) if "n_real" in batch else int(batch["input_ids"].numel())  # an int: no sync
        self._units[0] += real
        self._units[1] += int(batch["input_ids"].numel())
        self._units[2] += 1
        return real

    def step_metrics(self) -> dict[str, float]:
        """Since the last call: real (not padding) tokens per optimizer step across ranks, and
        the share of padding in the batches."""
        real, total, micro = self._units
        self._units = [0, 0, 0]
        if not total:
            return {}
        steps = max(1.0, micro / self.settings.training.gradient_accumulation_steps)
        return {"tokens_per_step": real * self.ctx.world_size / steps, "padding_ratio": 1 - real / total}

    # -- optimisation ---------------------------------------------------------------
    def loss(self, model, batch):
        """Mean token loss over the trained tokens of this micro-batch on ALL ranks: each rank
        divides its summed loss by the global count / world size (``num_items_in_batch``), so
        the ranks' averaged gradients equal one process's over the whole batch even when the
        loss mask leaves the ranks different token counts."""
        keys = ("input_ids", "labels", "position_ids", "attention_mask")
        inputs = {k: batch[k] for k in keys if k in batch}
        return model(**inputs, num_items_in_batch=_items_per_rank(batch["labels"])).loss

    # -- export ---------------------------------------------------------------------
    def _meta_model(self):
        import torch
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(self.config())
        return self._lora(model) if self.settings.model.type == "lora" else model

    def export_streamed(self, source, out_dir: Path, max_shard_size) -> bool:
        """`export`'s files written shard by shard from a checkpoint's `Source` (never the whole
        model in memory); False when transformers' save of this model cannot be streamed."""
        from ..export_shards import write_streamed

        if not write_streamed(self._meta_model(), source, out_dir, max_shard_size):
            return False
        self.tokenizer().save_pretrained(str(out_dir))
        return True

    def export(self, state_dict, out_dir: Path) -> None:
        from ..export_shards import DEFAULT_MAX_SHARD

        out_dir.mkdir(parents=True, exist_ok=True)
        model = self._meta_model()
        state_dict = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
        missing, unexpected = model.load_state_dict(state_dict, strict=False, assign=True)
        missing = [k for k in missing if "rotary_emb" not in k]
        if unexpected or missing:
            raise FamilyError(f"checkpoint does not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
        if self.settings.model.type == "lora":
            # The unmerged adapter too (PEFT's own files): PeftModel.from_pretrained(base, DIR/adapter).
            model.save_pretrained(str(out_dir / "adapter"), safe_serialization=True)
            model = model.merge_and_unload()
        # Non-persistent buffers (rotary frequencies) are still on meta: recompute on CPU.
        for _name, mod in model.named_modules():
            if hasattr(mod, "inv_freq") and mod.inv_freq.is_meta:
                inv_freq, scale = mod.rope_init_fn(mod.config, "cpu") if hasattr(mod, "rope_init_fn") else (None, None)
                if inv_freq is not None:
                    mod.register_buffer("inv_freq", inv_freq, persistent=False)
                    mod.original_inv_freq = inv_freq
        model.save_pretrained(str(out_dir), state_dict=model.state_dict(), safe_serialization=True,
                              max_shard_size=self.ctx.extra.get("max_shard_size", DEFAULT_MAX_SHARD))
        self.tokenizer().save_pretrained(str(out_dir))
