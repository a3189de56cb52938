"""The diffusion family's use of the cache (`cache.LatentCache`): which entries a data set
needs, the encoders that fill them, the build across ranks before training, and the
prompts validation samples with, read from the cache instead of the text encoder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...data_sources.driver import rank_data
from ...data_sources.image_sets import ImageDataset, image_digest, load_image
from ...data_sources.latent_cache import Entry, LatentCache, digest, folder_fingerprint
from .conditioning import TINY_TEXT_LEN, vae_latents

#: The family (`family.DiffusionFamily`; not imported: it imports this module).
DiffusionFamily = Any


def cache_root(fam: DiffusionFamily) -> Path:
    d = fam.settings.data
    if d.cache_dir:
        return fam.ctx.resolve(d.cache_dir)
    return fam.ctx.resolve(fam.settings.output.dir) / "cache"


def make_cache(fam: DiffusionFamily) -> LatentCache:
    """The cache with this run's encoder fingerprints (built-ins: their construction recipe)."""
    folder = None if fam._builtin() is not None else fam._folder()
    if folder is not None and (folder / "vae").is_dir():
        vae_id = folder_fingerprint(folder / "vae")
    else:
        vae_id = digest("pixels")
    text_id: str | None = None
    if fam.has_text():
        if folder is not None and (folder / "text_encoder").is_dir():
            text_id = digest(folder_fingerprint(folder / "text_encoder"), folder_fingerprint(folder / "tokenizer"))
        else:
            cfg = fam.denoiser_config()
            hidden = cfg.get("cross_attention_dim") or cfg.get("joint_attention_dim") or 32
            text_id = digest("builtin-clip", hidden, cfg.get("pooled_projection_dim") or hidden, TINY_TEXT_LEN)
    return LatentCache(cache_root(fam), vae_id, text_id)


def plan(cache: LatentCache, ds: ImageDataset, extra_captions: list[str] = ()) -> list[Entry]:  # type: ignore[assignment]
    """The entries `ds` needs (its images at their buckets, its captions, the empty caption,
    `extra_captions`), and the keys attached to `ds` so its items come from the cache."""
    entries: list[Entry] = []
    latent_keys: list[str] = []
    for i, row in enumerate(ds.rows):
        src = ds.image(row)
        key = cache.latent_key(image_digest(src), ds.size_of(i))
        latent_keys.append(key)
        entries.append(Entry("latent", key, src, ds.size_of(i)))
    text_keys: list[str] = []
    uncond = ""
    if cache.text_id is not None:
        for cap in [r["caption"] for r in ds.rows] + ["", *extra_captions]:
            entries.append(Entry("text", cache.text_key(cap), cap))
        text_keys = [cache.text_key(r["caption"]) for r in ds.rows]
        uncond = cache.text_key("")
    ds.attach_cache(cache, latent_keys, text_keys, uncond)
    return entries


def encode_device():
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def encoder(fam: DiffusionFamily, device):
    """`encode(kind, entries)` for `LatentCache.build`: the VAE (or pixels) and the text encoder."""
    import torch

    def encode(kind: str, entries: list[Entry]) -> list[dict[str, Any]]:
        if kind == "text":
            cond = fam.conditioner()
            assert cond is not None
            hidden, pooled = cond([e.source for e in entries], device)
            return [{"hidden": h, "pooled": p} for h, p in zip(hidden, pooled, strict=True)]
        out = []
        for e in entries:  # sizes may differ across a chunk: one image at a time
            pixels = load_image(e.source, e.size).unsqueeze(0).to(device)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(e.key[:8], 16))  # the VAE's latent sample: whichever rank encodes
                out.append({"latents": vae_latents(fam.vae(), pixels)[0]})
        return out

    return encode


def build(fam: DiffusionFamily, datasets: list[ImageDataset | None], prompts: list[str]) -> tuple[LatentCache, int]:
    """Build the cache for `datasets` across the ranks; return it and this rank's encode count.
    The VAE and text encoder are loaded only when something is missing, and dropped after."""
    cache = make_cache(fam)
    entries: list[Entry] = []
    for n, ds in enumerate(datasets):
        if ds is not None:
            entries += plan(cache, ds, prompts if n == 0 else [])
    barrier = _barrier()
    count = cache.build(entries, encoder(fam, encode_device()), fam.ctx.rank, fam.ctx.world_size, barrier)
    fam.drop_encoders()
    return cache, count


def _barrier():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.barrier
    return lambda: None


class CachedPrompts:
    """``encode(prompts, device)`` for sampling, from the cache's text entries."""

    def __init__(self, cache: LatentCache) -> None:
        self.cache = cache

    def __call__(self, prompts: list[str], device):
        import torch

        items = [self.cache.load("text", self.cache.text_key(p)) for p in prompts]
        return (torch.stack([i["hidden"] for i in items]).to(device),
                torch.stack([i["pooled"] for i in items]).to(device))



def report(fam: DiffusionFamily) -> dict[str, Any]:
    """What `tuner data` shows: images, buckets and the cache's state, without building it."""
    import dataclasses

    settings = dataclasses.replace(fam.settings, data=dataclasses.replace(fam.settings.data, cache_latents=False))
    fam.settings = fam.ctx.settings = settings
    data = rank_data(fam)  # the ranks' own driver (no cache is built: cache_latents is off here)
    train, val = data.train, data.val
    cache = make_cache(fam)
    prompts = fam.validation_prompts(val)[0] if fam.has_text() and val is not None else []
    entries = plan(cache, train, prompts) + (plan(cache, val) if val is not None else [])
    buckets: dict[str, int] = {}
    for i in range(len(train)):
        w, h = train.size_of(i)
        buckets[f"{w}x{h}"] = buckets.get(f"{w}x{h}", 0) + 1
    kinds = ("latent", "text") if cache.text_id is not None else ("latent",)
    status = {kind: cache.status(entries, kind) for kind in kinds}
    return {"images": len(train), "validation_images": len(val) if val is not None else 0,
            "buckets": dict(sorted(buckets.items())), "cache_dir": str(cache.root),
            "cache": status}
