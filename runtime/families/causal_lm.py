"""Causal language models (transformers): next-token loss on packed text.

Model: ``model.path`` is a local directory (``AutoModelForCausalLM.from_pretrained``) or
``builtin`` / ``builtin:NAME`` for a tiny configuration built locally (see `BUILTIN`).
Data: ``data.path`` is a local JSONL file (a ``text`` field per line), a text file (one
document per blank-line-separated paragraph), or ``builtin`` for the bundled corpus.
Documents are tokenised, joined with the end-of-text token and packed into rows of
``data.seq_len`` tokens; validation is ``data.validation_path`` or the last
``data.validation_split`` of the documents (split before packing, so no row straddles).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from tuner.compiler import builtin_models

from .base import Family, FamilyContext, FamilyError, read_jsonl
from .lora import apply_lora, quantization_kwargs

#: The Llama config fields a built-in (compiler/builtin_models.py, the one registry) gives its
#: shape by; the rest (vocabulary, special tokens) comes from the bundled tokenizer.
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


def read_documents(path: Path) -> list[str]:
    """Documents from a JSONL (``text`` field) or plain text file (blank-line separated)."""
    if not path.is_file():
        raise FamilyError(f"data file not found: {path}")
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".jsonl", ".json"):
        docs = []
        for n, item in read_jsonl(path):
            if not isinstance(item.get("text"), str):
                raise FamilyError(f"{path}:{n}: each line needs a string field 'text'")
            docs.append(item["text"])
        return docs
    return [p.strip() for p in text.split("\n\n") if p.strip()]


class PackedDataset:
    """Rows of `seq_len` token ids (a map-style dataset over a 2-D tensor)."""

    def __init__(self, rows: "Any") -> None:
        self.rows = rows

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.rows[i]}


class CausalLMFamily(Family):
    name = "causal_lm"
    unit = "tok"

    def __init__(self, ctx: FamilyContext) -> None:
        super().__init__(ctx)
        self._tokenizer = None

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

    # -- data -----------------------------------------------------------------------
    def _pack(self, docs: list[str]):
        import torch

        tok = self.tokenizer()
        seq = self.settings.data.seq_len
        ids: list[int] = []
        eos = tok.eos_token_id
        for enc in tok(docs, add_special_tokens=False)["input_ids"]:
            ids.extend(enc)
            if eos is not None:
                ids.append(eos)
        n = len(ids) // seq
        if n == 0:
            raise FamilyError(f"the data holds {len(ids)} tokens, fewer than one row of data.seq_len = {seq}")
        return torch.tensor(ids[: n * seq], dtype=torch.long).view(n, seq)

    def build_datasets(self):
        d = self.settings.data
        path = bundled_dir() / "corpus.jsonl" if d.path == "builtin" else self.ctx.resolve(d.path)
        docs = read_documents(path)
        if d.validation_path:
            train_docs, val_docs = docs, read_documents(self.ctx.resolve(d.validation_path))
        elif d.validation_split > 0:
            n_val = max(1, int(len(docs) * d.validation_split))
            train_docs, val_docs = docs[:-n_val], docs[-n_val:]
        else:
            train_docs, val_docs = docs, []
        train = PackedDataset(self._pack(train_docs))
        val = PackedDataset(self._pack(val_docs)) if val_docs else None
        return train, val

    def collate(self, samples):
        import torch

        ids = torch.stack([s["input_ids"] for s in samples])
        return {"input_ids": ids, "labels": ids.clone()}

    def batch_units(self, batch) -> int:
        return int(batch["input_ids"].numel())

    # -- optimisation ---------------------------------------------------------------
    def loss(self, model, batch):
        return model(input_ids=batch["input_ids"], labels=batch["labels"]).loss

    # -- export ---------------------------------------------------------------------
    def export(self, state_dict, out_dir: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        out_dir.mkdir(parents=True, exist_ok=True)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(self.config())
        if self.settings.model.type == "lora":
            model = self._lora(model)
        state_dict = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
        missing, unexpected = model.load_state_dict(state_dict, strict=False, assign=True)
        missing = [k for k in missing if "rotary_emb" not in k]
        if unexpected or missing:
            raise FamilyError(f"checkpoint does not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
        if self.settings.model.type == "lora":
            model = model.merge_and_unload()
        # Non-persistent buffers (rotary frequencies) are still on meta: recompute on CPU.
        for name, mod in model.named_modules():
            if hasattr(mod, "inv_freq") and mod.inv_freq.is_meta:
                inv_freq, scale = mod.rope_init_fn(mod.config, "cpu") if hasattr(mod, "rope_init_fn") else (None, None)
                if inv_freq is not None:
                    mod.register_buffer("inv_freq", inv_freq, persistent=False)
                    mod.original_inv_freq = inv_freq
        model.save_pretrained(str(out_dir), state_dict=model.state_dict(), safe_serialization=True)
        self.tokenizer().save_pretrained(str(out_dir))
