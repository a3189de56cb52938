"""Block detection speed: `tuner blocks` on a 7B config vs building a 1.1B model for real.

    python bench/detect_speed.py [--repeat 3] [--skip-real]

Each measurement is a whole process (interpreter start, imports, work, exit), started with
`subprocess` and reaped with `os.wait4`, whose rusage gives that child's own peak RSS.

* ``blocks 7B``: ``tuner blocks DIR --refresh --json`` on a local directory holding only a
  config.json with Llama-2-7B's shape (6.74B parameters): what tuner does.
* ``blocks 7B cached``: the same without ``--refresh`` (the JSON cache; no torch import).
* ``real 1.1B``: ``AutoModelForCausalLM.from_config`` of a TinyLlama-1.1B-shaped config on
  the CPU in fp32: what a detector that instantiates the model does.

Targets (issue 5): the 7B detection <= 3 s and <= 600 MB peak RSS for the whole process.
The machine is shared and often loaded, so each detection is paired with an anchor run of
``python -c "import torch"``; the ratio, times the anchor's idle figure (1.21 s), projects
the wall time on an idle machine.
Nothing is downloaded; the configs are written to a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LLAMA2_7B = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
    "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "float16",
}
TINYLLAMA_1B = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
    "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
    "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
}
REAL_BUILD = (
    "import sys, torch\n"
    "from transformers import AutoConfig, AutoModelForCausalLM\n"
    "m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(sys.argv[1]), dtype=torch.float32)\n"
    "print(sum(p.numel() for p in m.parameters()))\n"
)
#: The imports any meta-device build of a transformers Llama needs, and nothing else.
FLOOR = "import torch, transformers, transformers.modeling_utils, transformers.models.llama.modeling_llama"
TARGET_SECONDS, TARGET_MB = 3.0, 600.0
#: `python -c "import torch"` on this machine kind when idle (docs: cpu-distributed-facts.md).
QUIET_IMPORT_TORCH_S = 1.21


def measure_isolated(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MB, stdout) of `cmd` as a whole process.

    A small helper process runs it, so RUSAGE_CHILDREN's peak is that command's alone."""
    helper = (
        "import json, os, resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "wall = time.perf_counter() - t\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "print(json.dumps({'wall': wall, 'peak_mb': peak, 'rc': p.returncode, 'out': p.stdout,"
        " 'err': p.stderr[-2000:]}))\n"
    )
    res = subprocess.run([sys.executable, "-c", helper, *cmd], capture_output=True, text=True, env=env, check=True)
    data = json.loads(res.stdout)
    if data["rc"] != 0:
        raise SystemExit(f"command failed ({data['rc']}): {' '.join(cmd)}\n{data['err']}")
    return data["wall"], data["peak_mb"], data["out"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="detections to time (the median is reported)")
    ap.add_argument("--skip-real", action="store_true", help="skip the real 1.1B build (14 s, 4.5 GB)")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        seven, one = tmp_path / "llama-2-7b", tmp_path / "tinyllama-1.1b"
        for d, cfg in ((seven, LLAMA2_7B), (one, TINYLLAMA_1B)):
            d.mkdir()
            (d / "config.json").write_text(json.dumps(cfg))
        env = {**os.environ, "TUNER_CACHE_DIR": str(tmp_path / "cache")}
        tuner = [sys.executable, "-m", "tuner", "blocks", str(seven), "--json"]

        runs, anchors, floors = [], [], []
        for _ in range(max(1, args.repeat)):  # interleaved, so all see the same machine load
            runs.append(measure_isolated(tuner + ["--refresh"], env))
            anchors.append(measure_isolated([sys.executable, "-c", "import torch"], env)[0])
            floors.append(measure_isolated([sys.executable, "-c", FLOOR], env))
        walls = [r[0] for r in runs]
        peaks = [r[1] for r in runs]
        detected = json.loads(runs[-1][2])
        cached_wall, cached_peak, _ = measure_isolated(tuner, env)
        det_wall, det_peak = statistics.median(walls), statistics.median(peaks)

        print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}")
        print(f"7B config: {detected['total_parameters']:,} parameters, suggested {detected['suggested']}, "
              f"meta build + inspection {detected['seconds']:.2f} s inside the process (the rest is imports)")
        print(f"blocks 7B (meta, --refresh): {det_wall:6.2f} s wall  {det_peak:7.0f} MB peak RSS "
              f"(median of {len(runs)}: walls {', '.join(f'{w:.2f}' for w in walls)})")
        print(f"blocks 7B (cached):          {cached_wall:6.2f} s wall  {cached_peak:7.0f} MB peak RSS")
        anchor = statistics.median(anchors)
        floor_wall = statistics.median(f[0] for f in floors)
        floor_peak = statistics.median(f[1] for f in floors)
        print(f"floor (imports a Llama build needs, nothing built): {floor_wall:6.2f} s wall  {floor_peak:7.0f} MB; "
              f"tuner's own share {det_wall - floor_wall:+.2f} s")
        projected = det_wall / anchor * QUIET_IMPORT_TORCH_S
        print(f"anchor `import torch`:       {anchor:6.2f} s wall (median); detection / anchor = {det_wall / anchor:.2f}")
        print(f"projected on a quiet machine (import torch = {QUIET_IMPORT_TORCH_S} s): {projected:.2f} s")
        ok = det_wall <= TARGET_SECONDS and det_peak <= TARGET_MB
        print(f"targets <= {TARGET_SECONDS:.0f} s and <= {TARGET_MB:.0f} MB: {'met' if ok else 'NOT met'}")
        if not args.skip_real:
            real_wall, real_peak, out = measure_isolated([sys.executable, "-c", REAL_BUILD, str(one)], env)
            print(f"real 1.1B (CPU, fp32):       {real_wall:6.2f} s wall  {real_peak:7.0f} MB peak RSS "
                  f"({int(out.strip().splitlines()[-1]):,} parameters)")
            print(f"ratios real 1.1B / meta 7B:  wall {real_wall / det_wall:.1f}x, peak RSS {real_peak / det_peak:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
