"""`tuner checkpoint export CKPT --out DIR`: a full model from any saved checkpoint.

CKPT is a checkpoint folder (``OUTPUT/checkpoints/step-N``) or the checkpoints folder
itself (its latest complete checkpoint is used). DeepSpeed, FSDP (sharded or full) and DDP
checkpoints are all gathered into one safetensors model with its config and tokenizer.
"""

from __future__ import annotations

import sys


def run(args) -> int:
    if getattr(args, "checkpoint_command", None) != "export":
        print("tuner checkpoint: choose an action: export", file=sys.stderr)
        return 2
    from tuner.runtime.artefacts import RunError
    from tuner.runtime.families import FamilyError

    try:
        from tuner.runtime.export import export_checkpoint

        out = export_checkpoint(args.checkpoint, args.out)
    except (RunError, FamilyError) as exc:
        print(f"tuner checkpoint export: {exc}", file=sys.stderr)
        return 2
    print(f"exported {args.checkpoint} -> {out}")
    return 0
