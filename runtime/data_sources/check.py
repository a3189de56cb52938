"""The data, opened and checked once in `tuner run`'s launcher, before any rank starts.

A family that can check its data has ``check_data() -> str`` (one summary line, or a
`DataError`/`FamilyError`). For causal LMs this also tokenises and packs the set into
`datasets`' cache, so the ranks only read it. Streamed sets are checked on their first rows.
"""

from __future__ import annotations

from pathlib import Path

from ...compiler.keys import paths as K
from .errors import DataError

#: Rows of a streamed set that are encoded before the ranks start.
STREAM_CHECK_ROWS = 200


def check_run_data(arts) -> str | None:
    """The summary line of the run's data, or None when its family checks nothing here.
    Raises RunError (exit 2) for data in the wrong shape."""
    from ..artefacts import RunError
    from ..families import FamilyError, get_family
    from ..families.base import FamilyContext

    s = arts.settings
    try:
        fam = get_family(s.model.family)(FamilyContext(settings=s, base_dir=arts.base_dir, seed=s.training.seed,
                                                       rank=0, world_size=arts.plan.world_size))
        check = getattr(fam, "check_data", None)
        if check is None:
            return None
        return check()
    except FamilyError as exc:
        raise RunError(str(exc), exit_code=getattr(exc, "exit_code", 2)) from None


def check_causal(fam) -> str:
    """Encode (or, streaming, sample) the data; the summary line."""
    s = fam.settings
    d, t = s.data, s.training
    if d.streaming and t.max_steps <= 0:
        raise DataError(K.DATA_STREAMING, "a stream's length is unknown, so the run needs a step count",
                        "set training.max_steps")
    pipe = fam.pipeline()
    pipe.packed = fam._packed()
    built, stats = pipe.build("train")
    if d.streaming:
        src, ds = built
        from .encode import Encoder

        enc = Encoder(pipe.tok, stats.format, d, src.where())
        n = 0
        for i, row in enumerate(ds):
            enc.one(row, i)
            n += 1
            if n >= STREAM_CHECK_ROWS:
                break
        return f"data: {src.label} ({stats.format}, streamed; the first {n} rows checked)"
    train, val = pipe.split_validation(built, stats)
    if d.validation_path:
        val, _ = pipe.build("validation")
    need = t.micro_batch_size * fam.ctx.world_size * t.gradient_accumulation_steps
    if len(train) < need:
        raise DataError(", ".join(d.files) or d.path,
                        f"{len(train)} training rows after packing, fewer than one optimizer step needs "
                        f"(micro_batch_size {t.micro_batch_size} x {fam.ctx.world_size} ranks x "
                        f"gradient_accumulation_steps {t.gradient_accumulation_steps} = {need})",
                        "add data, or lower the batch or data.seq_len")
    return summary(", ".join(d.files) or d.path, stats, d.seq_len, pipe.packed, len(val) if val is not None else 0)


def summary(label: str, stats, seq_len: int, packed: bool, val_rows: int) -> str:
    how = f"packed into {stats.rows} rows of {seq_len} tokens" if packed else f"{stats.rows} padded rows"
    dropped = f", {stats.dropped_for_length} dropped (longer than data.seq_len)" if stats.dropped_for_length else ""
    pad = f", padding {stats.padding_ratio:.0%}" if packed else ""
    val = f"; {val_rows} validation rows" if val_rows else ""
    return f"data: {label} ({stats.format}): {stats.documents} documents {how}{dropped}{pad}{val}"


def missing_paths(settings_data, base_dir: Path) -> list[str]:
    """Data paths named in the settings that do not exist here (for `tuner compile`'s warning)."""
    out = []
    for spec in [*(settings_data.files or [settings_data.path]), settings_data.validation_path]:
        if not spec or spec == "builtin" or any(c in spec for c in "*?["):
            continue
        p = Path(spec).expanduser()
        if not (p if p.is_absolute() else base_dir / p).exists():
            out.append(spec)
    return out
