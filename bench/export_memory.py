"""Peak memory of `tuner checkpoint export` (streamed) against the bound, and its bytes against
the full-state path's, on a locally made Llama of about 107M parameters (428 MB in fp32).

    python bench/export_memory.py [--kinds ddp,fsdp2,...] [--shard 100MB] [--keep DIR]    # kinds: KINDS

For each checkpoint kind: one `tuner run` on two gloo ranks (1 step, a checkpoint at step 1),
then two exports of that checkpoint, each in a fresh process:

* streamed: `tuner.runtime.export.export_checkpoint(CKPT, OUT, max_shard_size)`, what
  `tuner checkpoint export --max-shard-size` runs;
* full-state (the export before streaming): `full_state_dict(CKPT)` then the family's
  `export(state)` (save_pretrained with the same max_shard_size).

Each process first imports everything the export uses and builds the model on the meta
device, then resets its peak RSS (``/proc/self/clear_refs`` 5) and reads the baseline RSS;
after the export it reads the peak (``VmHWM``). Printed per kind: the largest output shard,
peak - baseline for both paths, the ratio of the streamed one to the largest shard (the bound
is 1.25), and whether every output file is byte-identical between the two paths.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "runtime"))
sys.path.insert(0, str(REPO))

FSDP2 = {"enabled": True, "version": 2, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}
KINDS = {"ddp": {}, "fsdp2": {"fsdp": FSDP2}, "fsdp2_full": {"fsdp": FSDP2, "checkpoint": {"state_dict_type": "full"}},
         "zero1": {"deepspeed": {"enabled": True, "zero_stage": 1}},
         "zero2": {"deepspeed": {"enabled": True, "zero_stage": 2}},
         "zero2_offload": {"deepspeed": {"enabled": True, "zero_stage": 2, "offload_optimizer": "cpu"}},
         "zero2_lora": {"deepspeed": {"enabled": True, "zero_stage": 2},  # frozen base: DeepSpeed's frozen fragments
                        "model": {"type": "lora", "lora_rank": 8, "lora_alpha": 16,
                                  "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}},
         "zero3": {"deepspeed": {"enabled": True, "zero_stage": 3}}}
#: 15 layers, 768 wide, MLP 2048, the bundled 512-token vocabulary: 107M parameters.
SHAPE = {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 15, "num_attention_heads": 12,
         "num_key_value_heads": 12}

CHILD = r"""
import gc, json, sys, time
from pathlib import Path
mode, ckpt, out, shard = sys.argv[1:5]
import torch, safetensors.torch, huggingface_hub, torch.distributed.checkpoint
from tuner.runtime import checkpoint as ck
from tuner.runtime.export import export_checkpoint, full_state_dict
from tuner.runtime.export_sources import open_source
from tuner.runtime.export_zero import open_zero
from tuner.compiler.keys.settings import Settings
from tuner.runtime.families import get_family
from tuner.runtime.families.base import FamilyContext
meta = ck.read_meta(Path(ckpt))
if meta.strategy.is_deepspeed:
    import deepspeed.utils.zero_to_fp32
s = Settings.from_dict(meta.manifest["settings"])
fam = get_family(meta.family)(FamilyContext(settings=s, base_dir=Path(meta.manifest["project_dir"]),
                                            extra={"max_shard_size": shard}))
fam._meta_model(); fam.tokenizer()  # imports and the model's classes, before the baseline
gc.collect()
Path("/proc/self/clear_refs").write_text("5")
def status(key):
    return int(next(l.split()[1] for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(key))) * 1024
base = status("VmRSS:")
t0 = time.perf_counter()
if mode == "streamed":
    export_checkpoint(Path(ckpt), Path(out), shard)
else:
    fam.export(full_state_dict(Path(ckpt), meta), Path(out))
print(json.dumps({"baseline": base, "peak": status("VmHWM:"), "seconds": time.perf_counter() - t0}))
"""


def make_checkpoint(root: Path, kind: str) -> Path:
    from runtime_helpers import merged, tuner_run
    from transformers import LlamaConfig, LlamaForCausalLM
    from tuner.runtime.families.causal_lm import bundled_dir

    d = root / kind
    base = root / "base"
    if not (base / "config.json").is_file():
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(bundled_dir() / "tokenizer"))
        cfg = LlamaConfig(vocab_size=len(tok), max_position_embeddings=512, tie_word_embeddings=False,
                          bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                          **SHAPE)
        LlamaForCausalLM(cfg).save_pretrained(str(base))
    if (d / "out" / "checkpoints" / "step-1" / "tuner_checkpoint.json").is_file():  # --keep: made before
        return d / "out" / "checkpoints" / "step-1"
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "base").exists():
        (d / "base").symlink_to(base)
    extra = {k: dict(v) for k, v in KINDS[kind].items()}
    model = {"path": "base", **extra.pop("model", {})}
    settings = merged(model=model, training={"micro_batch_size": 1, "max_steps": 1, "validation_every": 0,
                                             "learning_rate": 1e-4},
                      checkpoint={"every_steps": 1, "keep_last": 1, "export": False, **extra.pop("checkpoint", {})},
                      **extra)
    run = tuner_run(d, settings, trace=False, timeout=1800)
    if run.proc.returncode:
        raise SystemExit(f"{kind}: tuner run failed:\n{run.output[-3000:]}")
    return run.out / "checkpoints" / "step-1"


def export_in_child(mode: str, ckpt: Path, out: Path, shard: str) -> dict:
    from runtime_helpers import tuner_env

    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(ckpt), str(out), shard], capture_output=True,
                          text=True, env=tuner_env(), timeout=1800)
    if proc.returncode:
        raise SystemExit(f"{mode} export of {ckpt} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def identical(a: Path, b: Path) -> str:
    """"True" when every output file is byte-identical between the two folders, else the
    files that differ or that only one has."""
    def files(d: Path) -> set[str]:
        return {p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file() and p.name != "tuner_export.json"}

    fa, fb = files(a), files(b)
    differ = sorted(fa ^ fb) + sorted(f for f in fa & fb if not filecmp.cmp(a / f, b / f, shallow=False))
    return "True" if not differ else "differ: " + ", ".join(differ)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--shard", default="100MB")
    ap.add_argument("--keep", type=Path, default=None, help="work in DIR and keep it (checkpoints are reused)")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="tuner-export-bench-"))
    mib = 2**20
    print(f"model: Llama {SHAPE}, 107M parameters (fp32); --max-shard-size {args.shard}")
    print(f"{'kind':<11} {'shards':>6} {'largest MiB':>11} {'streamed MiB':>12} {'ratio':>6} {'full-state MiB':>14} "
          f"{'s/stream':>8} {'s/full':>6}  identical")
    try:
        for kind in args.kinds.split(","):
            t0 = time.perf_counter()
            ckpt = make_checkpoint(root, kind)
            made = time.perf_counter() - t0
            new, old = root / f"{kind}-streamed", root / f"{kind}-full"
            for p in (new, old):
                shutil.rmtree(p, ignore_errors=True)
            s = export_in_child("streamed", ckpt, new, args.shard)
            f = export_in_child("full", ckpt, old, args.shard)
            shards = sorted(new.glob("model*.safetensors"))
            largest = max(p.stat().st_size for p in shards)
            grown, grown_full = s["peak"] - s["baseline"], f["peak"] - f["baseline"]
            print(f"{kind:<11} {len(shards):>6} {largest / mib:>11.1f} {grown / mib:>12.1f} {grown / largest:>6.2f} "
                  f"{grown_full / mib:>14.1f} {s['seconds']:>8.1f} {f['seconds']:>6.1f}  {identical(new, old)}"
                  f"   (checkpoint made in {made:.0f} s; baseline {s['baseline'] / mib:.0f} MiB)", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
