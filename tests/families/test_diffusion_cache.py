"""The latent and text-embedding cache and the aspect-bucket sampler, in-process (the 2-rank
build, counted per rank, and the per-step buckets are in test_family_diffusion_runs.py):
a changed caption, image or resolution re-encodes only what changed; a build killed
mid-way (SIGKILL) resumes with what is missing; a cached batch gives the loss the uncached
one gives; caption dropout serves the cached empty caption; `tuner data` shows built,
missing and stale counts; every optimizer step's global batch is one bucket and an epoch
trains every image."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tuner.commands.cli import main as tuner_main
from tuner.compiler.keys.settings import Settings
from tuner.runtime.data_sources.buckets import BucketBatchSampler
from tuner.runtime.data_sources.driver import rank_data
from tuner.runtime.data_sources.image_batches import collate_images
from tuner.runtime.families.base import FamilyContext
from tuner.runtime.families.diffusion.family import DiffusionFamily

CAPTIONS = ["a red square", "a blue circle", "a green triangle", "a yellow star"]
SIZES = [(48, 32), (32, 32), (32, 48), (48, 32)]


def _sets(fam):
    """(train, validation) as the ranks get them: the data driver's."""
    data = rank_data(fam)
    return data.train, data.val


def _collate(fam, samples):
    """A batch as the ranks' loader makes it."""
    return collate_images(samples, tokenize=fam.data_recipe().tokenize)


def _data(folder: Path, captions=CAPTIONS) -> None:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for i, size in enumerate(SIZES):
        Image.new("RGB", size, (60 * i, 255 - 60 * i, 128)).save(folder / f"img{i}.png")
    (folder / "metadata.jsonl").write_text(
        "".join(json.dumps({"file_name": f"img{i}.png", "text": c}) + "\n" for i, c in enumerate(captions)))


def _settings(tmp_path: Path, **data) -> dict:
    return {"model": {"family": "diffusion", "path": "builtin:tiny-unet"}, "output": {"dir": str(tmp_path / "out")},
            "data": {"path": "train", "validation_split": 0.0, "resolution": 32, **data}}


def _family(tmp_path: Path, **data) -> DiffusionFamily:
    return DiffusionFamily(FamilyContext(settings=Settings.from_dict(_settings(tmp_path, **data)), base_dir=tmp_path))


def _built(tmp_path: Path, **data) -> DiffusionFamily:
    fam = _family(tmp_path, **data)
    fam.train_ds, _ = _sets(fam)
    return fam


def test_a_change_reencodes_only_what_changed(tmp_path):
    _data(tmp_path / "train")
    first = _built(tmp_path)
    assert first.encoded == 4 + 4 + 1  # four latents, four captions, the empty caption (dropout)
    assert first._cond is None and first._vae is None  # dropped after the build
    again = _built(tmp_path)
    assert again.encoded == 0 and again._cond is None  # complete: the text encoder is never built
    captions = CAPTIONS[:2] + ["a green hexagon"] + CAPTIONS[3:]
    _data(tmp_path / "train", captions)
    assert _built(tmp_path).encoded == 1  # the one new caption
    from PIL import Image

    Image.new("RGB", SIZES[1], (1, 2, 3)).save(tmp_path / "train" / "img1.png")
    fam = _built(tmp_path)
    assert fam.encoded == 1  # the one changed image
    led = fam.cache.ledger()
    assert [r["kind"] for r in led[-2:]] == ["text", "latent"]
    assert _built(tmp_path, resolution=24).encoded == 4  # every latent at its new bucket, no caption
    # the served latents are the cached ones of each image at its own bucket
    item = fam.train_ds[2]
    assert tuple(item["latents"].shape[1:]) == (item["size"][1], item["size"][0])
    assert item["size"][1] > item["size"][0]  # the portrait image stays portrait


def test_cached_batch_trains_like_the_uncached_one_and_dropout_uses_the_empty_caption(tmp_path):
    _data(tmp_path / "train")
    cached, plain = _built(tmp_path), _family(tmp_path, cache_latents=False)
    plain_ds, _ = _sets(plain)
    torch.manual_seed(0)
    model = cached.build_model()
    idx = [i for i in range(4) if cached.train_ds.bucket_of[i] == cached.train_ds.bucket_of[0]]
    losses = []
    for fam, ds in ((cached, cached.train_ds), (plain, plain_ds)):
        batch = _collate(fam, [ds[i] for i in idx])
        losses.append(fam.loss(model, batch, generator=torch.Generator().manual_seed(3)))
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    drop = _built(tmp_path, caption_dropout=0.5)
    uncond = drop.cache.load("text", drop.cache.text_key(""))["hidden"]
    items = [drop.train_ds[i % 4] for i in range(200)]
    dropped = sum(torch.equal(it["hidden"], uncond) for it in items)
    assert 60 < dropped < 140, dropped
    assert drop.encoded == 0  # the empty caption was cached once, by the first build


def test_tuner_data_shows_built_missing_and_stale(tmp_path, capsys):
    _data(tmp_path / "train")
    settings = tmp_path / "settings.toml"
    settings.write_text('[model]\nfamily = "diffusion"\npath = "builtin:tiny-unet"\n[data]\npath = "train"\n'
                        'validation_split = 0.0\nresolution = 32\n[output]\ndir = "out"\n')

    def state():
        capsys.readouterr()
        assert tuner_main(["data", str(settings), "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    rep = state()
    assert rep["cache"] == {"latent": {"built": 0, "missing": 4, "stale": 0},
                            "text": {"built": 0, "missing": 5, "stale": 0}}
    assert rep["buckets"] == {"24x40": 1, "32x32": 1, "40x24": 2}
    assert not (tmp_path / "out" / "cache").exists()  # showing builds nothing
    _built(tmp_path)
    _data(tmp_path / "train", CAPTIONS[:3] + ["a yellow moon"])
    rep = state()
    assert rep["cache"]["text"] == {"built": 4, "missing": 1, "stale": 1}
    assert rep["cache"]["latent"] == {"built": 4, "missing": 0, "stale": 0}


KILLED_BUILD = """
import sys, time
from pathlib import Path
from tuner.compiler.keys.settings import Settings
from tuner.runtime.families.base import FamilyContext
from tuner.runtime.data_sources import latent_cache as cache
from tuner.runtime.data_sources.driver import rank_data
from tuner.runtime.families.diffusion.family import DiffusionFamily

save = cache.LatentCache.save
def slow_save(self, kind, key, tensors):
    save(self, kind, key, tensors)
    print("saved", flush=True)
    time.sleep(0.3)
cache.LatentCache.save = slow_save
root = Path(sys.argv[1])
s = Settings.from_dict({"model": {"family": "diffusion", "path": "builtin:tiny-unet"},
                        "output": {"dir": str(root / "out")}, "data": {"resolution": 16}})
rank_data(DiffusionFamily(FamilyContext(settings=s, base_dir=root)))
"""


def test_a_build_killed_midway_resumes_with_what_is_missing(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    saved = 0
    deadline = time.monotonic() + 120
    while saved < 5 and time.monotonic() < deadline:
        saved += proc.stdout.readline().startswith("saved")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert saved == 5
    fam = DiffusionFamily(FamilyContext(settings=Settings.from_dict(
        {"model": {"family": "diffusion", "path": "builtin:tiny-unet"}, "output": {"dir": str(tmp_path / "out")},
         "data": {"resolution": 16}}), base_dir=tmp_path))
    on_disk = len(fam_cache_files(tmp_path))
    assert 5 <= on_disk < 40
    train, val = _sets(fam)
    assert fam.encoded == len(fam_cache_files(tmp_path)) - on_disk  # only what was missing
    for ds in (train, val):  # every entry the kill left, and every new one, loads whole
        for i in range(len(ds)):
            assert torch.isfinite(ds[i]["latents"]).all()


def fam_cache_files(root: Path) -> list[Path]:
    return [p for p in (root / "out" / "cache").rglob("*.pt")]


@pytest.mark.parametrize("world,accum", [(2, 1), (2, 2), (1, 3)])
def test_every_step_is_one_bucket_and_an_epoch_trains_every_image(world, accum):
    bucket_of = [0] * 11 + [1] * 3 + [2] * 20  # uneven buckets, one smaller than a step's batch
    s = BucketBatchSampler(bucket_of, micro_batch=2, world=world, accumulation=accum, seed=5)
    per_step = world * accum
    for epoch in (0, 1):
        s.set_epoch(epoch)
        batches = list(s)
        assert len(batches) == len(s) and len(s) % per_step == 0
        steps = [batches[k:k + per_step] for k in range(0, len(batches), per_step)]
        for step in steps:  # the micro-batches of all ranks and accumulation steps of one optimizer step
            assert len({bucket_of[i] for b in step for i in b}) == 1
            assert all(len(b) == 2 for b in step)
        seen = [i for b in batches for i in b]
        assert set(seen) == set(range(len(bucket_of)))  # every image at least once
        extra = len(seen) - len(bucket_of)
        assert extra == sum(-n % (2 * per_step) for n in (11, 3, 20))  # only the stated fill repeats
    s.set_epoch(0)
    first = list(s)
    s.set_epoch(1)
    assert list(s) != first  # a new order each epoch, the same on every rank (seeded)
    assert list(BucketBatchSampler(bucket_of, 2, world, accum, seed=5)) == first


def test_two_ranks_split_the_missing_entries_and_each_encodes_its_share_once(tmp_path):
    """`LatentCache.build` with two ranks (threads, a real barrier): every entry encoded by
    exactly one rank, both ranks return only when all exist; a rebuild encodes nothing."""
    import threading

    from tuner.runtime.data_sources.latent_cache import Entry, LatentCache

    entries = [Entry("latent", f"{i:064x}", i, (8, 8)) for i in range(9)] + [
        Entry("text", f"{100 + i:064x}", f"caption {i}") for i in range(5)]
    calls: dict[int, list[str]] = {0: [], 1: []}
    barrier = threading.Barrier(2)

    def rank(r: int) -> None:
        def encode(kind, part):
            calls[r].extend(e.key for e in part)
            return [{"latents": torch.zeros(1)} if kind == "latent" else {"hidden": torch.zeros(1)} for _ in part]

        LatentCache(tmp_path / "c", "vae", "text").build(entries, encode, r, 2, barrier.wait, chunk=2, poll_s=0.01)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert calls[0] and calls[1] and not set(calls[0]) & set(calls[1])
    assert sorted(calls[0] + calls[1]) == sorted(e.key for e in entries)
    cache = LatentCache(tmp_path / "c", "vae", "text")
    assert cache.status(entries) == {"built": 14, "missing": 0, "stale": 0}
    assert sorted((r["rank"], r["key"]) for r in cache.ledger()) == sorted(
        [(0, k) for k in calls[0]] + [(1, k) for k in calls[1]])
    assert cache.build(entries, lambda kind, part: [], 0, 1) == 0  # one rank later: nothing to encode
