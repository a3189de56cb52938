"""Rebuild the bundled corpus and tokenizer (run by hand; the outputs are committed).

    python runtime/data/build_bundled.py

The corpus is generated from templates with a fixed seed (no download, no licence
question) so that a tiny model's loss falls visibly within a few dozen steps. The
tokenizer is a byte-level BPE with a 512-token vocabulary trained on that corpus with the
`tokenizers` library and saved as a `PreTrainedTokenizerFast` directory.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent

SUBJECTS = ["the cat", "a dog", "the old farmer", "my sister", "the young pilot", "a small robot",
            "the teacher", "our neighbour", "the baker", "a curious fox", "the captain", "the gardener"]
VERBS = ["walked to", "looked at", "painted", "found", "carried", "cleaned", "visited", "remembered",
         "opened", "closed", "followed", "repaired"]
OBJECTS = ["the red door", "a wooden boat", "the quiet library", "an empty garden", "the blue kettle",
           "a heavy box", "the narrow bridge", "the tall tower", "a silver key", "the green lamp",
           "the busy market", "a broken clock"]
TIMES = ["in the morning", "at noon", "before dinner", "after the rain", "on monday", "at night",
         "during the storm", "in the spring"]
ENDINGS = ["and smiled.", "and went home.", "and sat down for a while.", "and told everyone about it.",
           "and then it was quiet.", "and wrote a short note."]


def sentence(rng: random.Random) -> str:
    return f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)} " \
           f"{rng.choice(TIMES)} {rng.choice(ENDINGS)}"


def corpus(n_docs: int = 1200, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(sentence(rng) for _ in range(rng.randint(2, 5))) for _ in range(n_docs)]


def main() -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    docs = corpus()
    with open(HERE / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps({"text": d}) + "\n")

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    fast.save_pretrained(HERE / "tokenizer")


if __name__ == "__main__":
    main()
