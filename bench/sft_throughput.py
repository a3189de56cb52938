"""Tokens/s of `tuner run` against trl's SFTTrainer: the same chat data, model and batch.

    python bench/sft_throughput.py [--steps 30] [--rows 400] [--batch 4] [--seq 256]

Both sides train a tiny Llama with a byte-level BPE tokenizer and a ChatML template (built
locally, tests/tiny_chat_llama.py) on the same conversations, one process, float32, AdamW,
padded batches (packing off on both: trl's packing is a different algorithm), loss on every
token. tuner: `tuner run` (the rate is metrics.jsonl's per-step throughput of real tokens,
averaged after the first 5 steps); trl: `SFTTrainer.train()` in this process, real (non-pad)
tokens counted from the batches it trains on, timed from step 6 to the end with a callback.
Prints both rates and their ratio (tuner / trl; target >= 1.0).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
WARMUP = 5


def tuner_rate(d: Path, model: Path, a) -> float:
    from tests.runtime.runtime_helpers import to_toml, tuner_env

    (d / "settings.toml").write_text(to_toml({
        "model": {"family": "causal_lm", "path": str(model)},
        "hardware": {"platform": "cpu", "num_processes": 1},
        "data": {"path": "chat.jsonl", "seq_len": a.seq, "validation_split": 0.0, "packing": False,
                 "completion_only_loss": False},
        "training": {"micro_batch_size": a.batch, "learning_rate": 1e-4, "max_steps": a.steps, "warmup_steps": 0,
                     "mixed_precision": "no",  # float32, as trl with bf16=False
                     "log_every": 1, "max_grad_norm": 0.0},
        "checkpoint": {"every_steps": 0, "export": False},
        "output": {"dir": "out"}}))
    p = subprocess.run([sys.executable, "-m", "tuner", "run", str(d / "settings.toml")], cwd=d, capture_output=True,
                       text=True, env=tuner_env())
    if p.returncode:
        sys.exit(p.stdout + p.stderr)
    m = [json.loads(x) for x in (d / "out" / "metrics.jsonl").read_text().splitlines()]
    rates = [x["throughput"] for x in m if "throughput" in x and x["step"] > WARMUP]
    return sum(rates) / len(rates)


def trl_rate(d: Path, model_dir: Path, a) -> float:
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    class Clock(TrainerCallback):
        t0 = 0.0
        tokens = 0

        def on_step_end(self, args, state, control, **kw):
            if state.global_step == WARMUP:
                self.t0, self.start_tokens = time.perf_counter(), state.num_input_tokens_seen

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    clock = Clock()
    args = SFTConfig(output_dir=str(d / "trl"), max_steps=a.steps, per_device_train_batch_size=a.batch,
                     learning_rate=1e-4, logging_steps=1, save_strategy="no", report_to=[], max_length=a.seq,
                     packing=False, bf16=False, use_cpu=True, dataloader_num_workers=0, seed=0,
                     include_num_input_tokens_seen="non_padding", disable_tqdm=True)
    ds = load_dataset("json", data_files=str(d / "chat.jsonl"), split="train")
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, callbacks=[clock])
    trainer.train()
    seconds = time.perf_counter() - clock.t0
    return (trainer.state.num_input_tokens_seen - clock.start_tokens) / seconds


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rows", type=int, default=400)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    a = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from tests.tiny_chat_llama import build_tiny_chat_llama, chat_rows, write_jsonl

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        model = build_tiny_chat_llama(d / "model")
        write_jsonl(d / "chat.jsonl", chat_rows(a.rows))
        ours = tuner_rate(d, model, a)
        theirs = trl_rate(d, model, a)
    print(f"tuner run:       {ours:10.0f} tokens/s")
    print(f"trl SFTTrainer:  {theirs:10.0f} tokens/s")
    print(f"ratio tuner/trl: {ours / theirs:.2f} (target >= 1.0)")


if __name__ == "__main__":
    main()
