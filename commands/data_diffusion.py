"""`tuner data` for a diffusion model: the images, their aspect buckets, and the latent and
text-embedding cache's state (``built``: entries this data needs and the cache holds;
``missing``: needed, not yet encoded; ``stale``: held, needed by no image or caption any more),
read without building anything (no VAE or text encoder is loaded)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..compiler.diagnostics import EXIT_OK, EXIT_USAGE


def show(settings: Any, project_dir: Path, as_json: bool) -> int:
    from ..runtime.families import FamilyError
    from ..runtime.families.base import FamilyContext
    from ..runtime.families.diffusion.cached import report
    from ..runtime.families.diffusion.family import DiffusionFamily

    fam = DiffusionFamily(FamilyContext(settings=settings, base_dir=project_dir, seed=settings.training.seed))
    try:
        rep = report(fam)
    except FamilyError as exc:
        print(f"tuner data: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", EXIT_USAGE)
    if as_json:
        print(json.dumps(rep, indent=1))
        return EXIT_OK
    print(f"images: {rep['images']} for training, {rep['validation_images']} for validation")
    print("aspect buckets (width x height: images): "
          + ", ".join(f"{size}: {n}" for size, n in rep["buckets"].items()))
    print(f"cache: {rep['cache_dir']}" + ("" if settings.data.cache_latents else " (data.cache_latents = false: "
                                                                                   "not used by tuner run)"))
    for kind, st in rep["cache"].items():
        what = "latents" if kind == "latent" else "text embeddings"
        print(f"  {what}: {st['built']} built, {st['missing']} missing, {st['stale']} stale")
    return EXIT_OK
