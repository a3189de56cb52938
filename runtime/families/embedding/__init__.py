"""Embedding family: a transformers encoder trained contrastively (vembed-factory's recipe).

One module per concern, independent of the strategy the trainer runs under:

* `model`: any `AutoModel` encoder (BERT-style, or a decoder used as an encoder) from a
  local folder, the packaged all-MiniLM-L6-v2 (``builtin:all-minilm-l6-v2``), or a tiny
  BERT built from a configuration (``builtin`` / ``builtin:tiny-bert``), wrapped with a
  pooling head (mean / CLS / last token) in `EmbeddingModel`;
* `data`: JSONL rows ``{"query", "positive", "negatives"?}`` tokenised so that queries,
  positives and hard negatives go through the model in ONE forward (FSDP and DDP both prefer
  one forward per step);
* `loss`: InfoNCE with in-batch negatives gathered across ranks (`gather_with_grad`), so
  the negatives of every query are the global batch, with a loss per Matryoshka dimension;
* `evaluate`: recall@1 and MRR on a held-out split;
* `export`: a folder that `AutoModel.from_pretrained` (and sentence-transformers) loads,
  LoRA merged in;
* `family`: `EmbeddingFamily`, the `Family` the trainer drives, built from the above.
"""
