"""Tokenizers shared by the families: the tiny character-level one built locally, and a
local folder's tokenizer.

The embedding family's built-in encoder and the diffusion family's built-in text encoder
both use `build_tiny_tokenizer`, so it lives here rather than in either family.
"""

from __future__ import annotations

from pathlib import Path

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


def load_padded_tokenizer(folder: str | Path):
    """``AutoTokenizer`` of a local folder; a decoder's end-of-text token doubles as padding
    (decoders used as encoders ship without a pad token)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok
