"""Declared settings: what is trained, on what data, and where results go.

Each field is one key, declared once with `setting` (see `compiler/keys/declare.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, get_args

from .. import spellings
from ..choices import DataFormat, ModelType, Pooling, TrainedFamily, trained_family
from ..declare import setting


@dataclass(frozen=True)
class ModelSettings:
    """What is trained."""

    title: ClassVar[str] = "Model"
    step: ClassVar[str] = "model"
    family: str = setting(
        "causal_lm", aliases=("model_family",), open_choices=get_args(TrainedFamily),
        spellings=spellings.family, order=0,
        help="Model family tuner run trains: causal_lm (transformers), embedding (contrastive encoder) or "
             "diffusion (diffusers denoiser). Known names such as sdxl, flux, llama or bert are accepted "
             "and normalised; any other name (ltxvideo2, a SimpleTuner family) compiles, but tuner run "
             "refuses it.")

    flavour: str = setting(
        "", aliases=("model_flavour",), order=1,
        help="Family variant, e.g. unet or transformer for diffusion; free text otherwise. Part of the "
             "block-detection cache key.")
    path: str = setting(
        "builtin", aliases=("pretrained_model_name_or_path", "model_name"), order=2,
        help="A local model directory (from_pretrained), or 'builtin' / 'builtin:NAME' for a tiny "
             "configuration built locally.")
    type: ModelType = setting(
        "full", aliases=("model_type",), spellings=spellings.MODEL_TYPE,
        order=3,
        help="Train every weight (full) or LoRA adapters only (lora).")
    base_precision: str = setting(
        "no_change", aliases=("base_model_precision",), replaces={"load_in_4bit": {True: "nf4-bnb", False: "no_change"}},
        help="Precision of the frozen base model: no_change keeps it; nf4-bnb loads a causal LM folder's base "
             "in 4-bit NF4 (bitsandbytes, CUDA only) for QLoRA with model.type = \"lora\" (axolotl's "
             "load_in_4bit); other values (SimpleTuner's int8-quanto, ...) compile for your own trainer, "
             "tuner run refuses them.")
    lora_rank: int = setting(
        8, aliases=("lora_rank",), minimum=1, order=4,
        help="LoRA rank.")
    lora_alpha: float = setting(
        16, aliases=("lora_alpha",), exclusive_minimum=0, order=5,
        help="LoRA scaling alpha.")
    lora_dropout: float = setting(
        0.0, aliases=("lora_dropout",), minimum=0, maximum=1, order=6,
        help="LoRA dropout.")
    lora_target_modules: list[str] = setting(
        [], aliases=("lora_target_modules",), order=7,
        help="Module names LoRA adapts (e.g. [\"q_proj\", \"v_proj\"]); \"all-linear\" for every linear layer but "
             "the output head (PEFT's); empty picks the family's attention projections.")
    pooling: Pooling = setting(
        "mean", aliases=("pooling",), order=8,
        help="Embedding pooling.")
    mrl_dims: list[int] = setting(
        [], aliases=("mrl_dims",), item_minimum=1, order=9,
        help="Matryoshka dimensions for embedding models (a loss per dimension); empty uses the full "
             "width.")
    temperature: float = setting(
        0.05, aliases=("temperature",), exclusive_minimum=0, order=10,
        help="InfoNCE temperature for embedding models.")

    @property
    def trained_family(self) -> TrainedFamily | None:
        """`family` as one `tuner run` trains, or None (`choices.trained_family`)."""
        return trained_family(self.family)


@dataclass(frozen=True)
class DataSettings:
    """Training data."""

    title: ClassVar[str] = "Data"
    step: ClassVar[str] = "model"
    path: str = setting(
        "builtin", aliases=("data_path", "train_data"), order=11,
        help="A local JSONL / text file (causal LM, embedding pairs) or image folder (diffusion); "
             "'builtin' uses the small data set tuner ships.")
    validation_path: str = setting(
        "", aliases=("val_data_path",),
        help="Held-out data; empty splits validation_split off the training data.")
    validation_split: float = setting(
        0.1, minimum=0, maximum=0.5,
        help="Fraction held out when validation_path is empty.")
    seq_len: int = setting(
        128, aliases=("max_seq_length", "seq_len"), minimum=8, order=12,
        help="Tokens per packed sequence (causal LM) or max tokens (embedding).")
    resolution: int = setting(
        32, aliases=("resolution",), minimum=8, order=13,
        help="Image side in pixels for diffusion data.")
    caption_column: str = setting(
        "", aliases=("caption_column",),
        help="Diffusion: the caption column of metadata.jsonl / metadata.csv or a datasets source; empty "
             "takes the first of text, caption, prompt.")
    image_column: str = setting(
        "", aliases=("image_column",),
        help="Diffusion: the image column of a datasets source (save_to_disk folder, parquet, arrow, jsonl, "
             "csv); empty takes the column whose feature is an Image, else 'image'.")
    caption_dropout: float = setting(
        0.0, aliases=("caption_dropout_probability", "caption_dropout"), minimum=0, maximum=1,
        help="Diffusion: probability that a training image's caption is replaced by an empty one (for "
             "classifier-free guidance); 1.0 trains without text.")
    cache_latents: bool = setting(
        True,
        help="Diffusion: encode every image (VAE) and caption (text encoder) once before training, across the "
             "ranks, into data.cache_dir; training reads the files and never loads the encoders. false encodes "
             "on every step.")
    cache_dir: str = setting(
        "", aliases=("cache_dir",),
        help="Diffusion: the latent and text-embedding cache folder; empty is OUTPUT_DIR/cache. Entries are "
             "keyed by content (image, bucket, caption, encoder), so one folder serves many runs.")
    num_workers: int = setting(
        0, aliases=("dataloader_num_workers",), minimum=0,
        help="DataLoader worker processes.")
    # -- issue 21: data through Hugging Face `datasets` (runtime/data_sources/) ------------
    files: list[str] = setting(
        [], aliases=("data_files",),
        help="Several local data files or globs (json/jsonl, parquet, csv, arrow, txt), read as one set; "
             "used instead of path when given.")
    split: str = setting(
        "train", aliases=("dataset_split", "dataset_train_split"),
        help="The split to train on (a save_to_disk DatasetDict's split, or the split datasets names "
             "for local files: train).")
    streaming: bool = setting(
        False, aliases=("streaming",),
        help="Read the data as a stream (sets larger than host RAM): split across ranks without "
             "duplicates, resumable mid-epoch; needs training.max_steps.")
    format: DataFormat = setting(
        "auto", aliases=("dataset_format",),
        help="Row format: chat (a messages column), instruction (prompt/completion), text (raw), pairs "
             "(embedding); auto recognises it from the columns.")
    text_column: str = setting(
        "text", aliases=("dataset_text_field",),
        help="Column holding raw text (format text).")
    messages_column: str = setting(
        "messages", aliases=("chat_messages_field",),
        help="Column holding a conversation: a list of {role, content} (format chat).")
    prompt_column: str = setting(
        "prompt", help="Column holding the prompt (format instruction).")
    completion_column: str = setting(
        "completion", help="Column holding the completion (format instruction).")
    anchor_column: str = setting(
        "",
        help="Embedding: the query column; empty accepts query or anchor (sentence-transformers).")
    positive_column: str = setting(
        "positive", help="Embedding: the positive column.")
    negative_column: str = setting(
        "",
        help="Embedding: the hard-negative column (a string or a list of strings); empty accepts "
             "negatives or negative.")
    chat_template: str = setting(
        "", aliases=("chat_template",),
        help="A Jinja chat template (inline, or a path to a .jinja file) for tokenizers that have none; "
             "empty uses the tokenizer's own.")
    packing: bool = setting(
        True, aliases=("sample_packing", "packing"),
        help="Pack documents into rows of seq_len tokens, with position ids restarting at each document "
             "so attention stays inside it; false gives padded batches.")
    completion_only_loss: bool = setting(
        True, aliases=("completion_only_loss", "assistant_only_loss"),
        help="Loss on completions / assistant turns only (-100 on prompts, system and user turns); false "
             "trains on every token.")


@dataclass(frozen=True)
class OutputSettings:
    """Where results go."""

    title: ClassVar[str] = "Output"
    step: ClassVar[str] = "model"
    dir: str = setting(
        "output", aliases=("output_dir",), order=14,
        help="Run directory (metrics, checkpoints, export), relative to the settings file.")
