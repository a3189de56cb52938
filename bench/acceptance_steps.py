"""The parts of bench/gpu_acceptance.py that import torch, each run as its own process (so
the driver never holds GPU memory):

    python bench/acceptance_steps.py make-model OUT_DIR CONFIG_JSON cuda|cpu
    python bench/acceptance_steps.py check-export BUILD_DIR TRACE_JSON EXPORT_DIR INITIAL_DIR
    python bench/acceptance_steps.py build-ds-ops

Each prints one JSON line (the last line of its output) for the driver.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def make_model(out: str, config_json: str, device: str) -> None:
    """Random weights for `config_json`, saved with save_pretrained (bf16 on GPUs)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = json.loads(config_json)
    config = AutoConfig.for_model(cfg.pop("model_type"), **{k: v for k, v in cfg.items() if k != "architectures"})
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.save_pretrained(out, safe_serialization=True)
    print(json.dumps({"parameters": sum(p.numel() for p in model.parameters()), "layers": config.num_hidden_layers,
                      "hidden": config.hidden_size, "config": cfg, "saved_dtype": str(dtype).split(".")[-1]}))


def check_export(build_dir: str, trace: str, export_dir: str, initial_dir: str) -> None:
    """Logits of the exported model (from_pretrained) against the trained model's, one batch."""
    import contextlib

    import torch
    from transformers import AutoModelForCausalLM
    from tuner.runtime.artefacts import load
    from tuner.runtime.data_sources.driver import rank_data
    from tuner.runtime.families import get_family
    from tuner.runtime.families.base import FamilyContext

    arts = load(build_dir)
    s = arts.settings
    fam = get_family(s.model.family)(FamilyContext(s, arts.base_dir, seed=s.training.seed))
    data = rank_data(fam)
    ids = data.collate([data.train[i] for i in range(2)])["input_ids"]  # the batch the trainer's trace used
    dev = "cuda" if torch.cuda.is_available() and arts.plan.platform != "cpu" else "cpu"
    bf16 = s.training.mixed_precision == "bf16"
    ref = torch.tensor(json.loads(Path(trace).read_text())["logits"])

    def logits(path: str):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(dev).eval()
        ctx = torch.autocast(dev, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with torch.no_grad(), ctx:
            return model(input_ids=ids.to(dev)).logits.float().cpu()[:, :4, :8]

    # bf16: both sides compute in bf16 (autocast, or DeepSpeed's bf16 engine), through
    # different kernels, so they agree to about 1% of the logits' scale, not bit for bit.
    atol, rtol = (1e-1, 3e-2) if bf16 else (1e-4, 1e-4)
    scale = float(ref.abs().max())
    diff = float((logits(export_dir) - ref).abs().max())
    # The same comparison for the untrained weights: it must fail, or the check proves nothing.
    control = float((logits(initial_dir) - ref).abs().max())
    tol = atol + rtol * scale
    print(json.dumps({"match": diff <= tol, "max_abs_diff": diff, "tolerance": tol, "logit_scale": scale,
                      "untrained_max_abs_diff": control, "autocast_bf16": bf16, "device": dev}))


def build_ds_ops() -> None:
    """JIT-build DeepSpeed's Adam ops (CPU Adam for optimizer offload, FusedAdam on GPUs)
    ahead of the ZeRO runs; the runs then load them from torch's extension cache."""
    from deepspeed.accelerator import get_accelerator

    seconds = {}
    for name in ("FusedAdamBuilder", "CPUAdamBuilder"):  # ZeRO-3 (FusedAdam) runs first
        t = time.time()
        get_accelerator().create_op_builder(name).load()
        seconds[name] = round(time.time() - t, 1)
    print(json.dumps({"built": seconds}))


def main(argv: list[str]) -> int:
    commands = {"make-model": (make_model, 3), "check-export": (check_export, 4), "build-ds-ops": (build_ds_ops, 0)}
    if not argv or argv[0] not in commands or len(argv) - 1 != commands[argv[0]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    fn, _ = commands[argv[0]]
    fn(*argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
