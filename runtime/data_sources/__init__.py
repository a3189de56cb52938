"""Training data through Hugging Face `datasets` (issue 21), for the causal-LM and embedding families.

* `source`  - local files (json/jsonl, parquet, csv, arrow, text), globs, ``save_to_disk``
  folders, a split, streaming; hub names refused; unreadable files named with row and fix.
* `chat`    - a conversation rendered with the tokenizer's chat template, loss mask from
  rendering turn by turn (templates without ``{% generation %}`` markers included).
* `encode`  - a row of any causal-LM format -> (input_ids, labels); format detection.
* `packing` - rows of ``seq_len`` tokens with per-document position ids, or padded batches.
* `causal`  - the whole pipeline, cached by `datasets` (tokenised once per data set).
* `stream`  - a streamed set split across ranks, resumable mid-epoch.

Every problem a person can fix is a `DataError` (a `FamilyError`: one line, exit 2).
"""
