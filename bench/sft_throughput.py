"""Tokens/s of `tuner run` against trl's SFTTrainer: the same chat data, model and build.

    python bench/sft_throughput.py [--steps 30] [--rows 400] [--batch 4] [--seq 256] [--threads 1] [--repeat 3]

Both sides train a tiny Llama with a byte-level BPE tokenizer and a ChatML template (built
locally, tests/tiny_chat_llama.py) on the same conversations, and are held to the same work:

* one process each, ``--threads`` intra-op threads each (OMP_NUM_THREADS; the tuner rank's
  and trl's `torch.get_num_threads()` are printed, so a launcher that changes it shows);
* float32, AdamW (lr 1e-4, constant, no weight decay), gradient clipping at norm 1.0, no
  gradient checkpointing (trl's default turns it on: off here, as tuner's default);
* padded batches of ``--batch`` rows, no packing (trl's packing is another algorithm), at
  most ``--seq`` tokens, loss on every token;
* the rate: real (non-pad) tokens trained from the end of step 5 to the end of the last step,
  over the wall time between those two moments (tuner: ``tokens_seen`` and ``time`` of
  metrics.jsonl, written by the rank; trl: ``num_input_tokens_seen`` with
  ``include_num_input_tokens_seen="non_padding"`` and a callback's clock). Process start,
  model load, tokenisation and the first 5 steps are outside it on both sides.

The two sides run alternately ``--repeat`` times (the machine's load changes between runs);
each pair's ratio and the median ratio (tuner / trl; target >= 1.0) are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
WARMUP = 5
LR = 1e-4
CLIP = 1.0


class ThreadProbe:
    """A `tuner run --callback`: writes the rank's intra-op thread count beside metrics.jsonl."""

    def on_train_begin(self, trainer) -> None:
        import torch

        if trainer.main:
            (trainer.out / "threads.json").write_text(json.dumps({"threads": torch.get_num_threads()}))


def tuner_rate(d: Path, model: Path, a, run: int) -> tuple[float, int]:
    """(tokens/s, the rank's thread count) of one `tuner run`."""
    from tests.runtime.runtime_helpers import to_toml, tuner_env

    out = d / f"out-{run}"
    (d / "settings.toml").write_text(to_toml({
        "model": {"family": "causal_lm", "path": str(model)},
        "hardware": {"platform": "cpu", "num_processes": 1},
        "data": {"path": "chat.jsonl", "seq_len": a.seq, "validation_split": 0.0, "packing": False,
                 "completion_only_loss": False},
        "training": {"micro_batch_size": a.batch, "learning_rate": LR, "max_steps": a.steps, "warmup_steps": 0,
                     "lr_scheduler": "constant", "weight_decay": 0.0, "mixed_precision": "no",
                     "log_every": 1, "max_grad_norm": CLIP, "gradient_checkpointing": False},
        "checkpoint": {"every_steps": 0, "export": False},
        "output": {"dir": str(out)}}))
    p = subprocess.run([sys.executable, "-m", "tuner", "run", str(d / "settings.toml"),
                        "--callback", "bench.sft_throughput:ThreadProbe"], cwd=d, capture_output=True, text=True,
                       env=tuner_env({"OMP_NUM_THREADS": str(a.threads)}))
    if p.returncode:
        sys.exit(p.stdout + p.stderr)
    m = {x["step"]: x for x in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "tokens_seen" in x}
    first, last = m[WARMUP], m[a.steps]
    rate = (last["tokens_seen"] - first["tokens_seen"]) / (last["time"] - first["time"])
    return rate, json.loads((out / "threads.json").read_text())["threads"]


def trl_rate(d: Path, model_dir: Path, a, run: int) -> tuple[float, int]:
    """(tokens/s, thread count) of one `SFTTrainer.train()` in this process."""
    import torch
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    class Clock(TrainerCallback):
        t0 = t1 = 0.0
        n0 = n1 = 0

        def on_step_end(self, args, state, control, **kw):
            if state.global_step == WARMUP:
                self.t0, self.n0 = time.perf_counter(), state.num_input_tokens_seen
            elif state.global_step == a.steps:
                self.t1, self.n1 = time.perf_counter(), state.num_input_tokens_seen

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    clock = Clock()
    args = SFTConfig(output_dir=str(d / f"trl-{run}"), max_steps=a.steps, per_device_train_batch_size=a.batch,
                     learning_rate=LR, lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=CLIP,
                     gradient_checkpointing=False, logging_steps=1, save_strategy="no", report_to=[],
                     max_length=a.seq, packing=False, completion_only_loss=False, assistant_only_loss=False,
                     bf16=False, use_cpu=True, dataloader_num_workers=0, seed=0,
                     include_num_input_tokens_seen="non_padding", disable_tqdm=True)
    ds = load_dataset("json", data_files=str(d / "chat.jsonl"), split="train")
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, callbacks=[clock])
    trainer.train()
    return (clock.n1 - clock.n0) / (clock.t1 - clock.t0), torch.get_num_threads()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rows", type=int, default=400)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads of each side (OMP_NUM_THREADS)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each side, alternating")
    a = p.parse_args()
    if a.steps <= WARMUP:
        p.error(f"--steps must be more than the {WARMUP} warm-up steps")
    os.environ["OMP_NUM_THREADS"] = str(a.threads)  # before torch is imported, for trl's side
    from tests.tiny_chat_llama import build_tiny_chat_llama, chat_rows, write_jsonl

    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        model = build_tiny_chat_llama(d / "model")
        write_jsonl(d / "chat.jsonl", chat_rows(a.rows))
        for run in range(a.repeat):
            ours, ours_threads = tuner_rate(d, model, a, run)
            theirs, their_threads = trl_rate(d, model, a, run)
            pairs.append((ours, theirs))
            print(f"run {run + 1}: tuner run {ours:8.0f} tok/s ({ours_threads} thread(s)), "
                  f"trl SFTTrainer {theirs:8.0f} tok/s ({their_threads} thread(s)), ratio {ours / theirs:.2f}",
                  flush=True)
    ratios = [o / t for o, t in pairs]
    print(f"tuner run:       {statistics.median(o for o, _ in pairs):10.0f} tokens/s (median of {a.repeat})")
    print(f"trl SFTTrainer:  {statistics.median(t for _, t in pairs):10.0f} tokens/s (median of {a.repeat})")
    print(f"ratio tuner/trl: {statistics.median(ratios):.2f} (median of the runs' ratios; target >= 1.0)")


if __name__ == "__main__":
    main()
