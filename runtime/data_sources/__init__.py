"""Training data, file -> batch, for every family (issue 21; issue 38: one owner of the data path).

* `driver`  - the one driver: `rank_data` (what a rank trains on: datasets, collate, batch
  sampler) and `check_data` (the check before any rank starts), one sequence for both; a
  family answers only its hooks (`Family.data_recipe`, `Family.prepare_examples`).
* `image_batches` - a diffusion model's image sets and batches.
* `source`  - local files (json/jsonl, parquet, csv, arrow, text), globs, ``save_to_disk``
  folders, a split, streaming; hub names refused; unreadable files named with row and fix.
* `chat`    - a conversation rendered with the tokenizer's chat template, loss mask from
  rendering turn by turn (templates without ``{% generation %}`` markers included).
* `encode`  - a row of any causal-LM format -> (input_ids, labels); format detection.
* `packing` - rows of ``seq_len`` tokens with per-document position ids, or padded batches.
* `causal`  - the language-model pipeline, cached by `datasets` (tokenised once per data set);
  `rows` - its rows as the trainer's dataset.
* `stream`  - a streamed set split across ranks, resumable mid-epoch.
* `check`   - `tuner run`'s launcher check (the driver's) and `tuner compile`'s missing-path warning.
* `pairs`   - the embedding family's query/positive(/negatives) pairs and their collation.
* `images`, `image_sets`, `buckets`, `latent_cache` - the diffusion family's image and
  caption sources, its aspect-bucketed image sets, the bucket batch sampler, the latent and
  text-embedding cache's storage.

Every problem a person can fix is a `DataError` (a `FamilyError`: one line, exit 2).
"""
