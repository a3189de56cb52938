"""Diffusion family on two real gloo ranks through `tuner run`, one launch per denoiser kind,
each serving several assertions: the U-Net under FSDP2 and the transformer (DiT) under ZeRO-2
(the real SDXL/Flux/SD3 classes run under both strategies in test_diffusion_real_models_runs.py).
Validation images, EMA saved per shard (FSDP2) or once (ZeRO-2) and restored on resume (a
resumed run ends with the EMA saved at its checkpoint); the latent and text cache built once
across the ranks (each entry encoded by one rank, counted) and served to a later 1-rank build
without encoding; every optimizer step's batch one aspect bucket on both ranks (the U-Net run
trains at 32 px, where the bundled images make three buckets). The U-Net run reads a Hugging
Face imagefolder (images + metadata.jsonl with a ``text`` column) with caption dropout, and its
export loads with ``DiffusionPipeline.from_pretrained`` and samples one step."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from families_helpers import decreasing, run_example
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

STEPS = 8  # checkpoints and validation at 4 and 8
HALF = STEPS // 2
COMMON = (f"training.max_steps={STEPS}", f"training.validation_every={HALF}", f"checkpoint.every_steps={HALF}",
          "checkpoint.keep_last=2")
ZERO2 = ("fsdp.enabled=false", "deepspeed.enabled=true", "deepspeed.zero_stage=2")
FSDP2 = ("deepspeed.enabled=false", "fsdp.enabled=true", "fsdp.version=2", "fsdp.reshard_after_forward=true")
#: the U-Net run's data: the bundled images as an imagefolder with metadata.jsonl, caption dropout on
IMAGEFOLDER = ("data.path=imgs", "data.caption_dropout=0.1")
CASES = {
    "unet-fsdp2": ("diffusion_unet.toml", FSDP2 + ("data.resolution=32",) + IMAGEFOLDER),
    "dit-zero2": ("diffusion_dit.toml", ZERO2),
}


def _imagefolder(imgs: Path) -> dict[str, str]:
    """The bundled images in `imgs` with a metadata.jsonl (``file_name``, ``text``); {file: caption}."""
    from tuner.runtime.data_sources.image_sets import DATA_DIR

    imgs.mkdir(parents=True)
    captions = {}
    for line in (DATA_DIR / "captions.jsonl").read_text().splitlines():
        item = json.loads(line)
        name = item["file"].split("/")[-1]
        shutil.copy(DATA_DIR / item["file"], imgs / name)
        captions[name] = item["caption"]
    (imgs / "metadata.jsonl").write_text(
        "".join(json.dumps({"file_name": n, "text": c}) + "\n" for n, c in captions.items()))
    return captions


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("diffusion")
    (root / "unet-fsdp2").mkdir()  # the trace callback beside its settings (on the ranks' path)
    shutil.copy(Path(__file__).with_name("diffusion_trace.py"), root / "unet-fsdp2" / "diffusion_trace.py")
    _imagefolder(root / "unet-fsdp2" / "imgs")
    trace = {"unet-fsdp2": ("--callback", "diffusion_trace:buckets")}
    return {name: run_example(example, root / name, *COMMON, *extra, args=trace.get(name, ()))
            for name, (example, extra) in CASES.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_trains_validates_and_exports(runs, name):
    run = runs[name].check()
    losses = run.losses()
    assert len(losses) == STEPS
    first, last = decreasing(losses)
    assert last < first, f"{name}: loss did not decrease: {losses}"
    for step in (HALF, STEPS):
        folder = run.out / "validation" / f"step-{step}"
        pngs = sorted(folder.glob("0*.png"))
        assert len(pngs) >= 2 and (folder / "grid.png").is_file(), f"no validation images in {folder}"
    from PIL import Image

    res = 32 if name == "unet-fsdp2" else 16
    with Image.open(pngs[0]) as im:
        assert im.size == (res, res) and im.mode == "RGB"
    # validation ran on the sharded model and produced a finite loss
    assert all(v == v for v in [m["val_loss"] for m in run.metrics() if "val_loss" in m])
    # EMA saved with each checkpoint: per rank (FSDP2, sharded) or once (ZeRO-2, replicated)
    ema = run.out / "checkpoints" / f"step-{STEPS}" / "ema"
    meta = json.loads((ema / "ema.json").read_text())
    assert meta["num_updates"] == STEPS
    assert meta["sharded"] == name.endswith("fsdp2")
    assert sorted(p.name for p in ema.glob("rank*.safetensors")) == (
        ["rank0.safetensors", "rank1.safetensors"] if meta["sharded"] else ["rank0.safetensors"])
    # the export is a diffusers folder that from_pretrained loads, with the EMA weights beside it
    import diffusers

    final = run.out / "final"
    info = json.loads((final / "tuner_diffusion.json").read_text())
    cls = getattr(diffusers, info["class_name"])
    model = cls.from_pretrained(str(final / info["denoiser"]))
    ema_model = cls.from_pretrained(str(final / f"ema_{info['denoiser']}"))
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in ema_model.parameters())
    assert (final / "scheduler" / "scheduler_config.json").is_file()


def test_imagefolder_with_caption_dropout_exports_a_loadable_pipeline(runs):
    """The U-Net run read the imagefolder's metadata.jsonl captions (no empty-caption warning)
    with caption dropout on; its export loads with DiffusionPipeline.from_pretrained (tuner's
    pipeline, remote code) and samples one step on CPU at the run's resolution."""
    from diffusers import DiffusionPipeline

    run = runs["unet-fsdp2"].check()
    assert "empty caption" not in run.output
    final = run.out / "final"
    assert json.loads((final / "model_index.json").read_text())["_class_name"] == ["tuner_pipeline", "TunerPipeline"]
    pipe = DiffusionPipeline.from_pretrained(str(final), trust_remote_code=True)
    caption = json.loads((run.dir / "imgs" / "metadata.jsonl").read_text().splitlines()[0])["text"]
    images = pipe(caption, num_inference_steps=1, output_type="pt")
    assert tuple(images.shape) == (1, 3, 32, 32) and torch.isfinite(images).all()


def test_fsdp2_ema_shadows_are_shards(runs):
    """Under FSDP2 each rank's EMA holds its own shard: the two files split the parameters."""
    ema = runs["unet-fsdp2"].check().out / "checkpoints" / f"step-{STEPS}" / "ema"
    r0, r1 = load_file(str(ema / "rank0.safetensors")), load_file(str(ema / "rank1.safetensors"))
    assert r0.keys() == r1.keys()
    import diffusers

    final = runs["unet-fsdp2"].out / "final"
    full = diffusers.UNet2DConditionModel.from_pretrained(str(final / "ema_unet")).state_dict()
    name = next(k for k in r0 if r0[k].dim() >= 1 and full[k].shape[0] >= 2)
    assert r0[name].shape[0] + r1[name].shape[0] == full[name].shape[0]
    torch.testing.assert_close(torch.cat([r0[name], r1[name]]), full[name].float())


def _full_ema(folder: Path) -> dict[str, torch.Tensor]:
    """The EMA of a checkpoint as full tensors (per-rank FSDP2 shards are dim-0 chunks)."""
    files = sorted(folder.glob("rank*.safetensors"))
    parts = [load_file(str(f)) for f in files]
    return {k: torch.cat([p[k] for p in parts]) if len(parts) > 1 and parts[0][k].dim() else parts[0][k]
            for k in parts[0]}


@pytest.mark.parametrize("name", ["unet-fsdp2", "dit-zero2"])
def test_resume_restores_ema(runs, name, tmp_path):
    """Resume the half-way checkpoint in a new folder and stop there: the exported EMA weights
    are exactly the EMA saved there (restored per shard, then gathered)."""
    import diffusers

    first = runs[name].check()
    example, extra = CASES[name]
    ckpt = first.out / "checkpoints" / f"step-{HALF}"
    if name == "unet-fsdp2":
        _imagefolder(tmp_path / "resumed" / "imgs")
    resumed = run_example(example, tmp_path / "resumed", *COMMON, *extra,
                          args=("--resume", str(ckpt), "--max-steps", str(HALF))).check()
    assert "resumed from" in resumed.output
    saved = _full_ema(ckpt / "ema")
    final = resumed.out / "final"
    info = json.loads((final / "tuner_diffusion.json").read_text())
    assert info["ema"] is True
    exported = getattr(diffusers, info["class_name"]).from_pretrained(str(final / f"ema_{info['denoiser']}")).state_dict()
    assert saved.keys() <= exported.keys()
    for k, v in saved.items():
        torch.testing.assert_close(exported[k].float(), v.reshape(exported[k].shape), rtol=0, atol=0)
    # the EMA moved away from the trained weights' start: it is not a fresh copy
    trained = getattr(diffusers, info["class_name"]).from_pretrained(str(final / info["denoiser"])).state_dict()
    assert any(not torch.equal(trained[k].float(), exported[k].float()) for k in saved)


def test_cache_built_once_across_ranks_then_served_to_one_rank(runs):
    """Each cache entry encoded by exactly one of the two ranks (the ledger counts them), the
    encoders never on the training ranks after the build; then a 1-rank build of the same
    settings finds the cache complete and encodes nothing."""
    from tuner.compiler.keys.settings import Settings
    from tuner.runtime.data_sources.driver import rank_data
    from tuner.runtime.families.base import FamilyContext
    from tuner.runtime.families.diffusion.family import DiffusionFamily

    run = runs["unet-fsdp2"].check()
    cache = run.out / "cache"
    ledger = {r: [json.loads(x) for x in (cache / "ledger" / f"rank{r}.jsonl").read_text().splitlines()]
              for r in (0, 1)}
    keys = [(e["kind"], e["key"]) for r in (0, 1) for e in ledger[r]]
    assert ledger[0] and ledger[1] and all(e["world"] == 2 for r in (0, 1) for e in ledger[r])
    assert len(keys) == len(set(keys)), "an entry was encoded twice"
    files = {(("latent" if p.parent.parent.name == "latents" else "text"), p.stem) for p in cache.rglob("*.pt")}
    assert set(keys) == files
    assert {k for k, _ in keys} == {"latent", "text"}
    trace = [json.loads(x) for r in (0, 1) for x in (run.out / "bucket-trace" / f"rank{r}.jsonl").read_text().splitlines()]
    assert trace and not any(t["encoders"] for t in trace)  # no VAE or text encoder in any training step
    settings = Settings.from_dict({"model": {"family": "diffusion", "path": "builtin:tiny-unet"},
                                   "data": {"path": "imgs", "resolution": 32, "validation_split": 0.1,
                                            "caption_dropout": 0.1},
                                   "output": {"dir": str(run.out)}})
    fam = DiffusionFamily(FamilyContext(settings=settings, base_dir=run.dir, seed=settings.training.seed,
                                        world_size=1))
    rank_data(fam)  # the data driver builds (here: finds) the cache through prepare_examples
    assert fam.encoded == 0 and fam._cond is None
    assert fam.cache.root == cache
    # caption dropout's unconditional case: the empty caption's embedding, one entry encoded once
    assert ("text", fam.cache.text_key("")) in keys


def test_every_step_batch_is_one_bucket_on_both_ranks(runs):
    run = runs["unet-fsdp2"].check()
    by_step: dict[int, set] = {}
    per_rank = {0: 0, 1: 0}
    for r in (0, 1):
        for line in (run.out / "bucket-trace" / f"rank{r}.jsonl").read_text().splitlines():
            t = json.loads(line)
            by_step.setdefault(t["step"], set()).add(tuple(t["hw"]))
            per_rank[r] += 1
    assert sorted(by_step) == list(range(STEPS)) and per_rank == {0: STEPS, 1: STEPS}
    assert all(len(sizes) == 1 for sizes in by_step.values()), by_step
    assert len(set().union(*by_step.values())) == 3  # portrait, square and landscape buckets all trained
