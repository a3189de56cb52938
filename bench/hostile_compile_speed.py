"""How long do hostile files under 1 MB take to compile, relative to a bundled example?

Issue 11 found two inputs that took seconds: one long line inside a multi-line TOML string
(a super-quadratic regex in the key locator) and a model ``config.json`` with millions of
layers (one parameter size listed per tensor). Each case below is compiled in-process
(`tuner.compiler.compile.compile_file`, what every command calls) and compared with the largest
bundled example, interleaved, median of N runs. Target: every case below 1 s, whatever
the ratio.

    python bench/hostile_compile_speed.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LIMIT_S = 1.0


def cases(d: Path) -> dict[str, Path]:
    """name -> settings file; every file (settings and what it points at) is under 1 MB."""
    out = {}
    line = "x" * 900_000
    (d / "long_line.toml").write_text(f'note = """\n[{line}\n"""\n[hardware]\nplatform = "cpu"\n')
    out["long line in a multi-line string (900 kB)"] = d / "long_line.toml"
    (d / "long_header.toml").write_text("[" + " " * 900_000 + "\n")
    out["unclosed [ header, 900 kB of spaces"] = d / "long_header.toml"
    model = d / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 5_000_000, "num_attention_heads": 4,
        "vocab_size": 100, "num_local_experts": 64}))
    (d / "layers.toml").write_text(f'[model]\npath = "{model}"\n[hardware]\nplatform = "cuda"\ngpu_memory_gib = 24\n'
                                   '[fsdp]\nenabled = true\ntransformer_layer_cls_to_wrap = ["LlamaDecoderLayer"]\n')
    out["config.json with 5 million layers x 64 experts"] = d / "layers.toml"
    (d / "deep.toml").write_text("a = " + "[" * 400_000 + "]" * 400_000)
    out["800 kB of nested arrays"] = d / "deep.toml"
    (d / "dotted.toml").write_text("x" + ".y" * 400_000 + " = 1\n")
    out["a dotted key 400,000 levels deep"] = d / "dotted.toml"
    return out


def once(path: Path) -> float:
    from tuner.compiler.compile import compile_file
    from tuner.compiler.read.source import SourceError

    start = time.perf_counter()
    try:
        compile_file(path)
    except SourceError:
        pass  # a refusal is a verdict too; what is measured is how long it takes
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sys.setrecursionlimit(1000)  # the default: no help from a raised limit
    baseline_file = max((REPO / "examples").glob("*.toml"), key=lambda p: p.stat().st_size)
    with tempfile.TemporaryDirectory() as tmp:
        files = cases(Path(tmp))
        once(baseline_file)  # imports, schema load
        worst = 0.0
        print(f"{'case':<50} {'size':>9} {'median s':>9} {'x example':>10}")
        for name, path in files.items():
            size = sum(p.stat().st_size for p in (path, *Path(tmp, "model").glob("*.json")) if p.exists())
            times, base = [], []
            for _ in range(args.runs):
                base.append(once(baseline_file))
                times.append(once(path))
            t, b = statistics.median(times), statistics.median(base)
            worst = max(worst, t)
            print(f"{name:<50} {size:>9,} {t:>9.3f} {t / b:>10.1f}")
        print(f"baseline: {baseline_file.name} {statistics.median(base) * 1000:.1f} ms; "
              f"worst case {worst:.3f} s (limit {LIMIT_S} s): {'OK' if worst < LIMIT_S else 'TOO SLOW'}")
    return 0 if worst < LIMIT_S else 1


if __name__ == "__main__":
    sys.exit(main())
