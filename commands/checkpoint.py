"""`tuner checkpoint export CKPT --out DIR`: a full model from any saved checkpoint.

CKPT is a checkpoint folder (``OUTPUT/checkpoints/step-N``) or the checkpoints folder
itself (its latest complete checkpoint is used). DeepSpeed, FSDP (sharded or full) and DDP
checkpoints are all gathered into one safetensors model with its config and tokenizer.

DIR must be new, empty, or an earlier export (it holds ``tuner_export.json``, listing what
tuner wrote there); only those entries are replaced, and nothing else in DIR is touched.
"""

from __future__ import annotations

import sys

from ..compiler.diagnostics import EXIT_OK, EXIT_USAGE


def run(args) -> int:
    if getattr(args, "checkpoint_command", None) != "export":
        print("tuner checkpoint: choose an action: export", file=sys.stderr)
        return EXIT_USAGE
    from ..runtime.artefacts import RunError
    from ..runtime.families import FamilyError

    try:
        from ..runtime.export import export_checkpoint

        out = export_checkpoint(args.checkpoint, args.out, args.max_shard_size)
    except (RunError, FamilyError) as exc:
        print(f"tuner checkpoint export: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # a full or read-only disk: the export removed what it had written
        from ..compiler.read.files import describe_os_error

        print(f"tuner checkpoint export: error: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_USAGE
    print(f"exported {args.checkpoint} -> {out}")
    return EXIT_OK
