"""The data, opened and checked once in `tuner run`'s launcher, before any rank starts, by the
same driver the ranks use (`driver.check_data`). For causal LMs this also tokenises and packs
the set into `datasets`' cache, so the ranks only read it. Streamed sets are checked on their
first rows.
"""

from __future__ import annotations

from pathlib import Path


def check_run_data(arts) -> str | None:
    """The summary line of the run's data, or None when its family checks nothing here.
    Raises RunError (exit 2) for data in the wrong shape."""
    from ..artefacts import RunError
    from ..families import FamilyError, get_family
    from ..families.base import FamilyContext
    from .driver import check_data

    s = arts.settings
    try:
        fam = get_family(s.model.family)(FamilyContext(settings=s, base_dir=arts.base_dir, seed=s.training.seed,
                                                       rank=0, world_size=arts.plan.world_size))
        return check_data(fam)
    except FamilyError as exc:
        raise RunError(str(exc), exit_code=getattr(exc, "exit_code", 2)) from None


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
