"""Diffusion family on two real gloo ranks through `tuner run`: U-Net and transformer
denoisers under FSDP2 and ZeRO-2, validation images, EMA saved per shard and restored on
resume (a resumed run ends with the same EMA as an uninterrupted one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from families_helpers import decreasing, run_example
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

STEPS = 12  # checkpoints and validation at 6 and 12
COMMON = (f"training.max_steps={STEPS}", "training.validation_every=6", "checkpoint.every_steps=6",
          "checkpoint.keep_last=2")
ZERO2 = ("fsdp.enabled=false", "deepspeed.enabled=true", "deepspeed.zero_stage=2")
FSDP2 = ("deepspeed.enabled=false", "fsdp.enabled=true", "fsdp.version=2", "fsdp.reshard_after_forward=true")
CASES = {
    "unet-fsdp2": ("diffusion_unet.toml", FSDP2),
    "unet-zero2": ("diffusion_unet.toml", ZERO2),
    "dit-fsdp2": ("diffusion_dit.toml", FSDP2 + ("fsdp.auto_wrap_policy=none",)),
    "dit-zero2": ("diffusion_dit.toml", ZERO2),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("diffusion")
    return {name: run_example(example, root / name, *COMMON, *extra) for name, (example, extra) in CASES.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_trains_validates_and_exports(runs, name):
    run = runs[name].check()
    losses = run.losses()
    assert len(losses) == STEPS
    first, last = decreasing(losses)
    assert last < first, f"{name}: loss did not decrease: {losses}"
    for step in (6, 12):
        folder = run.out / "validation" / f"step-{step}"
        pngs = sorted(folder.glob("0*.png"))
        assert len(pngs) >= 2 and (folder / "grid.png").is_file(), f"no validation images in {folder}"
    from PIL import Image

    with Image.open(pngs[0]) as im:
        assert im.size == (16, 16) and im.mode == "RGB"
    # validation ran on the sharded model and produced a finite loss
    assert all(v == v for v in [m["val_loss"] for m in run.metrics() if "val_loss" in m])
    # EMA saved with each checkpoint: per rank (FSDP2, sharded) or once (ZeRO-2, replicated)
    ema = run.out / "checkpoints" / "step-12" / "ema"
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


def test_fsdp2_ema_shadows_are_shards(runs):
    """Under FSDP2 each rank's EMA holds its own shard: the two files split the parameters."""
    ema = runs["unet-fsdp2"].check().out / "checkpoints" / "step-12" / "ema"
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
    """Resume the step-6 checkpoint in a new folder and stop there: the exported EMA weights
    are exactly the EMA saved at step 6 (restored per shard, then gathered)."""
    import diffusers

    first = runs[name].check()
    example, extra = CASES[name]
    ckpt = first.out / "checkpoints" / "step-6"
    resumed = run_example(example, tmp_path / "resumed", *COMMON, *extra,
                          args=("--resume", str(ckpt), "--max-steps", "6")).check()
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
