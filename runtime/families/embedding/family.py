"""`EmbeddingFamily`: contrastive training of a sentence encoder, as the trainer drives it."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from ...data_sources.pairs import batch_size_of
from ..base import Family, FamilyContext, FamilyError
from ..lora import apply_lora
from ..recipes import PairData
from ..text import build_tiny_tokenizer, load_padded_tokenizer
from .evaluate import gather_heldout, retrieval_report
from .export import export_embedding_model
from .loss import contrastive_loss
from .model import EmbeddingModel, resolve_model_path, tiny_bert_config

#: Default LoRA targets: the attention projections of BERT-style and Llama-style encoders.
DEFAULT_LORA_TARGETS = ["query", "key", "value", "q_proj", "k_proj", "v_proj"]


class EmbeddingFamily(Family):
    """Contrastive training of a sentence encoder on query/positive pairs."""

    name = "embedding"
    unit = "pairs"

    def __init__(self, ctx: FamilyContext) -> None:
        super().__init__(ctx)
        self._tokenizer = None

    def _path(self) -> str:
        p = self.settings.model.path.strip()
        return p if p == "builtin" or p.startswith("builtin:") else str(self.ctx.resolve(p))

    def tokenizer(self):
        if self._tokenizer is None:
            kind, folder = self._resolve()
            self._tokenizer = build_tiny_tokenizer() if kind == "tiny" else load_padded_tokenizer(folder)
        return self._tokenizer

    def _resolve(self):
        try:
            return resolve_model_path(self._path())
        except (ValueError, RuntimeError) as exc:
            raise FamilyError(str(exc)) from None

    def _encoder(self, meta: bool = False):
        from transformers import AutoConfig, AutoModel, BertModel

        kind, folder = self._resolve()
        if kind == "tiny":
            cfg = tiny_bert_config(len(self.tokenizer()))
            if meta:
                with torch.device("meta"):
                    return BertModel(cfg, add_pooling_layer=False)
            return BertModel(cfg, add_pooling_layer=False)
        if meta:
            with torch.device("meta"):
                return AutoModel.from_config(AutoConfig.from_pretrained(str(folder)))
        return AutoModel.from_pretrained(str(folder), dtype=torch.float32)

    def _with_lora(self, model: EmbeddingModel) -> EmbeddingModel:
        model.encoder = apply_lora(model.encoder, self.settings.model, DEFAULT_LORA_TARGETS, only_present=True)
        return model

    # -- model ----------------------------------------------------------------------
    def build_model(self, meta: bool = False):
        enc = self._encoder(meta)
        if getattr(enc, "pooler", None) is not None:  # unused by every pooling mode here
            enc.pooler = None
        return EmbeddingModel(enc, self.settings.model.pooling)

    def prepare_model(self, model):
        s = self.settings
        if s.training.gradient_checkpointing and hasattr(model.encoder, "gradient_checkpointing_enable"):
            model.encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if s.model.type == "lora":
            try:
                model = self._with_lora(model)
            except ValueError as exc:  # peft refusing the targets: a settings problem
                raise FamilyError(str(exc)) from None
        return model

    def wrap_classes(self, model) -> list[str]:
        enc = model.encoder
        base = enc.get_base_model() if hasattr(enc, "get_base_model") else enc
        return list(getattr(base, "_no_split_modules", None) or [])

    # -- data (runtime/data_sources/pairs.py reads and batches it) ---------------------
    def data_recipe(self) -> PairData:
        return PairData(tokenizer=self.tokenizer())

    def batch_units(self, batch) -> int:
        return batch_size_of(batch)[0]

    # -- optimisation ---------------------------------------------------------------
    def loss(self, model, batch):
        bsz, n_neg = batch_size_of(batch)
        emb = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        m = self.settings.model
        return contrastive_loss(emb, bsz, n_neg, m.temperature, m.mrl_dims)

    def evaluate(self, model, batches, accelerator) -> dict[str, float]:
        """Held-out retrieval: every rank embeds its share, the embeddings are gathered, and
        each query ranks the positives of the WHOLE held-out split (recall@1, MRR), plus
        the contrastive loss, at full width and per Matryoshka dimension."""
        q, p = gather_heldout(model, batches, accelerator)
        if accelerator.is_main_process:  # the held-out embeddings, for inspection and export checks
            from safetensors.torch import save_file

            step = int(self.ctx.extra.get("step", 0))
            out = Path(self.ctx.extra.get("output_dir") or self.ctx.resolve(self.settings.output.dir))
            folder = out / "validation" / f"step-{step}"
            folder.mkdir(parents=True, exist_ok=True)
            save_file({"queries": q.contiguous(), "positives": p.contiguous()}, str(folder / "embeddings.safetensors"))
        metrics = retrieval_report(q, p, self.settings.model.mrl_dims)
        qn, pn = F.normalize(q, dim=-1), F.normalize(p, dim=-1)
        logits = qn @ pn.T / self.settings.model.temperature
        metrics["val_loss"] = float(F.cross_entropy(logits, torch.arange(q.shape[0])))
        return metrics

    # -- export ---------------------------------------------------------------------
    def export(self, state_dict, out_dir: Path) -> None:
        model = self.prepare_model_for_export()
        state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in state_dict.items()}
        try:
            export_embedding_model(model, self.tokenizer(), out_dir, self.settings.model.mrl_dims, state_dict=state)
        except RuntimeError as exc:
            raise FamilyError(str(exc)) from None

    def prepare_model_for_export(self) -> EmbeddingModel:
        # Keep the checkpoint's pooler (unused, so not trained) so from_pretrained finds every weight.
        model = EmbeddingModel(self._encoder(), self.settings.model.pooling)
        if self.settings.model.type == "lora":
            model = self._with_lora(model)
        return model

    def describe(self) -> str:
        m = self.settings.model
        extra = f", mrl {m.mrl_dims}" if m.mrl_dims else ""
        return f"embedding ({m.path}), {m.pooling} pooling, InfoNCE t={m.temperature}{extra}"
