"""`tuner checkpoint ACTION`: export, inspect and verify saved checkpoints.

* ``export CKPT --out DIR [--max-shard-size 5GB]``: a full model from any saved checkpoint,
  read and written one shard at a time. CKPT is a checkpoint
  folder (``OUTPUT/checkpoints/step-N``) or the checkpoints folder itself (its latest complete
  checkpoint is used). DeepSpeed, FSDP (sharded or full) and DDP checkpoints are all gathered
  into one safetensors model with its config and tokenizer. DIR must be new, empty, or an
  earlier export (it holds ``tuner_export.json``, listing what tuner wrote there); only those
  entries are replaced, and nothing else in DIR is touched.
* ``inspect CKPT [--json]``: step, strategy, world size, data position, sizes per part, and
  what the checkpoint resumes into (runtime/checkpoint_inspect.py).
* ``verify REFERENCE RESUMED [--json]``: the continuation check (runtime/continuation.py);
  exit 0 when the resumed run continues the reference's training, 1 when it does not.
"""

from __future__ import annotations

import sys

from ..compiler.diagnostics import EXIT_INVALID, EXIT_OK, EXIT_USAGE


def run(args) -> int:
    action = getattr(args, "checkpoint_command", None)
    if action not in ("export", "inspect", "verify"):
        print("tuner checkpoint: choose an action: export, inspect, verify", file=sys.stderr)
        return EXIT_USAGE
    from ..runtime.artefacts import RunError
    from ..runtime.families import FamilyError

    try:
        return {"export": _export, "inspect": _inspect, "verify": _verify}[action](args)
    except (RunError, FamilyError) as exc:
        print(f"tuner checkpoint {action}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # a full or read-only disk: the export removed what it had written
        from ..compiler.read.files import describe_os_error

        print(f"tuner checkpoint {action}: error: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_USAGE


def _export(args) -> int:
    from ..runtime.export import export_checkpoint

    out = export_checkpoint(args.checkpoint, args.out, args.max_shard_size)
    print(f"exported {args.checkpoint} -> {out}")
    return EXIT_OK


def _inspect(args) -> int:
    import json

    from ..runtime.checkpoint_inspect import describe, to_text

    info = describe(args.checkpoint)
    print(json.dumps(info, indent=2) if args.json else to_text(info))
    return EXIT_OK


def _verify(args) -> int:
    from ..runtime import continuation as c

    loss_rtol = args.loss_rtol if args.loss_rtol is not None else c.LOSS_RTOL
    param_rtol = args.param_rtol if args.param_rtol is not None else c.PARAM_RTOL
    verdict = c.verify(args.reference, args.resumed, loss_rtol, param_rtol)
    print(verdict.to_json() if args.json else c.report_text(verdict, loss_rtol, param_rtol), end="\n" * (not args.json))
    return EXIT_OK if verdict.ok else EXIT_INVALID
