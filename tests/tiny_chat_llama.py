"""A tiny Llama and its tokenizer, built locally for data and chat tests (nothing downloaded).

The tokenizer is a small byte-level BPE trained here with `tokenizers`, with a ChatML chat
template WITHOUT ``{% generation %}`` markers (as Llama 3, Qwen and most real templates are),
so loss masking must find the assistant turns by rendering turn by turn. The template refuses
roles other than system/user/assistant (``raise_exception``), as many real ones do.
"""

from __future__ import annotations

import json
from pathlib import Path

CHATML = (
    "{% for m in messages %}"
    "{% if m['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role: ' + m['role']) }}{% endif %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]

WORDS = ("the cat sat on a mat while dogs ran in the park and birds sang songs about rain sun wind "
         "what is two plus two four hello how are you fine thanks answer question system user assistant "
         "you are a helpful model write short poem tell me about paris france capital city").split()


def sentences(n: int, seed: int = 0) -> list[str]:
    import random

    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))).capitalize() + "." for _ in range(n)]


def build_tokenizer(out: Path | None = None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(sentences(400) + [" ".join(WORDS)] * 5, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<pad>",
                                  bos_token=None, unk_token=None)
    tok.chat_template = CHATML
    if out is not None:
        tok.save_pretrained(str(out))
    return tok


def build_tiny_chat_llama(out: Path) -> Path:
    """Save a tiny Llama (hidden 32, 2 layers) and its tokenizer in `out`; returns `out`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out)
    if (out / "config.json").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(out)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None,
                      tie_word_embeddings=False)
    LlamaForCausalLM(cfg).save_pretrained(str(out))
    return out


def chat_rows(n: int, seed: int = 0) -> list[dict]:
    """Conversations: some with a system prompt, some with several turns."""
    s = sentences(4 * n, seed)
    rows = []
    for i in range(n):
        msgs = [{"role": "system", "content": "You are a helpful model."}] if i % 2 == 0 else []
        turns = 1 + i % 3
        for t in range(turns):
            msgs += [{"role": "user", "content": s[(4 * i + 2 * t) % len(s)]},
                     {"role": "assistant", "content": s[(4 * i + 2 * t + 1) % len(s)]}]
        rows.append({"messages": msgs})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
