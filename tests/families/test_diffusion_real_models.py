"""The real models' classes, tiny and built here (`builtin:tiny-sdxl`, `tiny-flux`, `tiny-sd3`),
in-process, no ranks: each one's conditioning is what its diffusers pipeline builds (checked
against the text encoders called by hand, and SDXL's time ids against the pipeline's own
``_get_add_time_ids``); tuner's training call of each denoiser gives the prediction the
pipeline's own denoising step uses; forward and backward reach every parameter; the cache
carries the extra conditioning and a run with a complete cache never builds an encoder; the
export loads as StableDiffusionXLPipeline / FluxPipeline / StableDiffusion3Pipeline.

Each built-in is built and exported once per module (`exported`), and each export loaded as
its pipeline once (`pipes`): the tests share them instead of building tiny pipelines again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tuner.compiler.keys.settings import Settings
from tuner.runtime.data_sources.driver import rank_data
from tuner.runtime.data_sources.image_batches import collate_images
from tuner.runtime.data_sources.image_sets import ImageDataset
from tuner.runtime.families.base import FamilyContext
from tuner.runtime.families.diffusion.family import DiffusionFamily
from tuner.runtime.families.diffusion.real_models import T5_LEN, TINY_CLIP_LEN
from tuner.runtime.families.diffusion.tuner_pipeline import denoise

pytestmark = pytest.mark.slow  # in-process, but ~2 min of model building and sampling on a loaded CPU

MODELS = {"tiny-sdxl": "StableDiffusionXLPipeline", "tiny-flux": "FluxPipeline", "tiny-sd3": "StableDiffusion3Pipeline"}
PROMPTS = ["a red circle on a white background", "a blue square"]


def _family(base: Path, name: str, **data) -> DiffusionFamily:
    s = Settings.from_dict({"model": {"family": "diffusion", "path": f"builtin:{name}"},
                            "data": {"resolution": 32, "cache_latents": False, **data},
                            "output": {"dir": str(base / "out")}})
    return DiffusionFamily(FamilyContext(settings=s, base_dir=base))


def _sets(fam):
    """(train, validation) as the ranks get them: the data driver's (the cache built when on)."""
    data = rank_data(fam)
    return data.train, data.val


def _collate(fam, samples):
    """A batch as the ranks' loader makes it."""
    recipe = fam.data_recipe()
    return collate_images(samples, tokenize=recipe.tokenize, extra=recipe.extra)


def _ids(tok, prompts, length):
    return tok(prompts, padding="max_length", max_length=length, truncation=True, return_tensors="pt").input_ids


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{name: (family, denoiser, export folder)}: each built-in built and exported once."""
    root = tmp_path_factory.mktemp("real")
    out = {}
    for name in MODELS:
        fam = _family(root / name, name)
        torch.manual_seed(0)
        model = fam.build_model()
        fam.export(model.state_dict(), root / name / "final")
        out[name] = (fam, model, root / name / "final")
    return out


@pytest.fixture(scope="module")
def pipes(exported):
    """{name: the export loaded as its diffusers pipeline}, once per module (a test that loads
    a LoRA into one unloads it again)."""
    from diffusers import DiffusionPipeline

    return {name: DiffusionPipeline.from_pretrained(str(final)) for name, (_, _, final) in exported.items()}


def test_conditioning_is_the_pipelines(exported):
    """SDXL: both CLIPs' penultimate hidden states side by side, pooled = the second's
    projection; Flux: T5's hidden states, CLIP's pooled output; SD3: the two CLIPs'
    penultimate states side by side, padded to T5's width, then T5's; the two projections
    side by side."""
    for name, (fam, _, _) in exported.items():
        c = fam.conditioner().components
        hidden, pooled = fam.conditioner()(PROMPTS, torch.device("cpu"))
        with torch.no_grad():
            if name == "tiny-sdxl":
                a = c["text_encoder"](_ids(c["tokenizer"], PROMPTS, TINY_CLIP_LEN), output_hidden_states=True)
                b = c["text_encoder_2"](_ids(c["tokenizer_2"], PROMPTS, TINY_CLIP_LEN), output_hidden_states=True)
                want = torch.cat([a.hidden_states[-2], b.hidden_states[-2]], -1), b.text_embeds
            elif name == "tiny-flux":
                a = c["text_encoder"](_ids(c["tokenizer"], PROMPTS, TINY_CLIP_LEN))
                t5 = c["text_encoder_2"](_ids(c["tokenizer_2"], PROMPTS, T5_LEN)).last_hidden_state
                want = t5, a.pooler_output
            else:
                a = c["text_encoder"](_ids(c["tokenizer"], PROMPTS, TINY_CLIP_LEN), output_hidden_states=True)
                b = c["text_encoder_2"](_ids(c["tokenizer_2"], PROMPTS, TINY_CLIP_LEN), output_hidden_states=True)
                t5 = c["text_encoder_3"](_ids(c["tokenizer_3"], PROMPTS, T5_LEN)).last_hidden_state
                clip = torch.cat([a.hidden_states[-2], b.hidden_states[-2]], -1)
                clip = torch.nn.functional.pad(clip, (0, t5.shape[-1] - clip.shape[-1]))
                want = torch.cat([clip, t5], 1), torch.cat([a.text_embeds, b.text_embeds], -1)
        torch.testing.assert_close(hidden, want[0], msg=name)
        torch.testing.assert_close(pooled, want[1], msg=name)
    # the widths the denoisers' configs take
    assert exported["tiny-sdxl"][1].config.cross_attention_dim == 64  # 32 + 32
    assert exported["tiny-sd3"][1].config.pooled_projection_dim == 32  # 16 + 16


def test_sdxl_time_ids_are_the_pipelines(exported, pipes, tmp_path):
    """A 48x64 (w x h) image in the 32-px buckets: original size, centre-crop offsets and the
    bucket, in the order StableDiffusionXLPipeline._get_add_time_ids makes them."""
    from PIL import Image
    from tuner.runtime.families.diffusion.real_models import sdxl_time_ids

    fam, _, _ = exported["tiny-sdxl"]
    img = tmp_path / "tall.png"
    Image.new("RGB", (48, 64)).save(img)
    size = (24, 40)  # a bucket narrower than the image's aspect: cropped top and bottom
    ids = sdxl_time_ids((48, 64), size)
    want = pipes["tiny-sdxl"]._get_add_time_ids((64, 48), (int(ids[2]), int(ids[3])), (40, 24), torch.float32,
                                  text_encoder_projection_dim=32)
    torch.testing.assert_close(ids, want[0])
    assert ids.tolist() == [64, 48, 0, 3, 40, 24]  # scaled to 30x40 to cover 24x40: 3 px cut on the left
    ds = ImageDataset([{"image": str(img), "caption": "x", "label": 0}], 32, fam._multiple())
    batch = _collate(fam, [ds[0]])
    torch.testing.assert_close(batch["time_ids"][0], sdxl_time_ids((48, 64), ds.size_of(0)))


def _pipeline_prediction(name, pipe, latents, prompt):
    """The denoiser output the pipeline's one Euler step used, recovered from the step:
    with a single step from sigma s to 0, x_next = x - s * prediction."""
    kw = {"guidance_scale": 1.0} if name != "tiny-flux" else {"guidance_scale": 3.5, "max_sequence_length": T5_LEN}
    if name == "tiny-sd3":
        kw["max_sequence_length"] = T5_LEN
    out = pipe(prompt, latents=latents.clone(), num_inference_steps=1, height=32, width=32, output_type="latent",
               **kw).images
    return out


def test_training_call_is_the_pipelines_call(exported, pipes):
    """tuner's `denoise` (what training and validation call) gives the prediction the
    exported diffusers pipeline's own step used: Flux packing, ids, timestep / 1000 and
    guidance; SD3's call; SDXL's added time ids and pooled embeddings."""
    from diffusers import FluxPipeline

    for name, (fam, _, _) in exported.items():
        pipe = pipes[name]
        den = pipe.unet if name == "tiny-sdxl" else pipe.transformer
        gen = torch.Generator().manual_seed(0)
        x = torch.randn((1, 4, 16, 16), generator=gen)
        hidden, pooled = fam.conditioner()([PROMPTS[0]], torch.device("cpu"))
        cond = {"hidden": hidden, "pooled": pooled, "labels": torch.zeros(1, dtype=torch.long)}
        sched = pipe.scheduler
        if name == "tiny-flux":
            latents = FluxPipeline._pack_latents(x, 1, 4, 16, 16)
            out = FluxPipeline._unpack_latents(_pipeline_prediction(name, pipe, latents, PROMPTS[0]), 32, 32, 2)
            cond["guidance"] = torch.full((1,), 3.5)
            pred = x - out  # sigma 1 -> 0
            mine = denoise(den, "flux", x, torch.full((1,), 1000.0), cond)
        elif name == "tiny-sd3":
            pred = x - _pipeline_prediction(name, pipe, x, PROMPTS[0])
            mine = denoise(den, "sd3", x, torch.full((1,), 1000.0), cond)
        else:
            out = _pipeline_prediction(name, pipe, x, PROMPTS[0])
            sched.set_timesteps(1)
            sigma, t = float(sched.sigmas[0]), sched.timesteps[0]
            start = x * sched.init_noise_sigma
            pred = (start - out) / sigma  # epsilon: x_next = x - sigma * eps
            cond["time_ids"] = torch.tensor([[32.0, 32, 0, 0, 32, 32]])
            mine = denoise(den, "sdxl", start / (sigma ** 2 + 1) ** 0.5, t.expand(1), cond)
        torch.testing.assert_close(mine, pred, atol=2e-4, rtol=1e-3, msg=name)


@pytest.mark.parametrize("name", list(MODELS))
def test_forward_backward_reaches_every_parameter(exported, name):
    fam, model, _ = exported[name]  # the module's built model (its gradients are dropped again)
    train, _ = _sets(fam)
    batch = _collate(fam, [train[i] for i in range(2)])
    model.zero_grad(set_to_none=True)
    try:
        loss = fam.loss(model, batch, generator=torch.Generator().manual_seed(0))
        loss.backward()
        no_grad = [n for n, p in model.named_parameters() if p.grad is None]
    finally:
        model.zero_grad(set_to_none=True)
    assert torch.isfinite(loss)
    assert not no_grad, f"{name}: parameters the loss does not reach: {no_grad[:5]}"
    assert fam.wrap_classes(model) == {"tiny-sdxl": ["BasicTransformerBlock", "ResnetBlock2D"],
                                       "tiny-flux": ["FluxTransformerBlock", "FluxSingleTransformerBlock"],
                                       "tiny-sd3": ["JointTransformerBlock"]}[name]


@pytest.mark.parametrize("name", ["tiny-sdxl", "tiny-flux"])
def test_cache_carries_the_conditioning_and_a_complete_cache_builds_no_encoder(exported, tmp_path, name):
    """The cache's latent entries hold SDXL's time ids beside the latents, its text entries
    the hidden states and pooled embedding; a second build of the same settings encodes
    nothing and never builds the VAE or a text encoder; the cached batch is the uncached one."""
    first = _family(tmp_path, name, cache_latents=True)
    train, _ = _sets(first)
    assert first.encoded > 0 and set(first.loaded) == {"text", "vae"}
    cache = first.cache
    latent = cache.load("latent", train.latent_keys[0])
    text = cache.load("text", train.text_keys[0])
    assert set(latent) == ({"latents", "time_ids"} if name == "tiny-sdxl" else {"latents"})
    assert latent["latents"].shape[0] == 4 and set(text) == {"hidden", "pooled"}
    assert text["pooled"].shape == (32,)
    again = _family(tmp_path, name, cache_latents=True)
    train2, _ = _sets(again)
    assert again.encoded == 0 and again.loaded == []
    cached = _collate(again, [train2[i] for i in range(2)])
    assert again.loaded == []
    plain = exported[name][0]  # the same settings without the cache (the module's built family)
    ptrain, _ = _sets(plain)
    uncached = _collate(plain, [ptrain[i] for i in range(2)])
    cond = plain._condition(uncached)
    torch.testing.assert_close(cached["hidden"], cond["hidden"])
    torch.testing.assert_close(cached["pooled"], cond["pooled"])
    if name == "tiny-sdxl":
        torch.testing.assert_close(cached["time_ids"], uncached["time_ids"])


def test_export_loads_as_the_diffusers_pipeline_and_samples(exported, pipes):
    for name, (_, model, final) in exported.items():
        index = json.loads((final / "model_index.json").read_text())
        assert index["_class_name"] == MODELS[name] and not (final / "tuner_pipeline.py").exists()
        pipe = pipes[name]  # DiffusionPipeline.from_pretrained, no remote code
        assert type(pipe).__name__ == MODELS[name]
        den = pipe.unet if name == "tiny-sdxl" else pipe.transformer
        for k, v in model.state_dict().items():
            torch.testing.assert_close(den.state_dict()[k], v)
        kw = {} if name == "tiny-sdxl" else {"max_sequence_length": T5_LEN}
        images = pipe(PROMPTS[0], num_inference_steps=2, height=32, width=32, output_type="np", **kw).images
        assert images.shape == (1, 32, 32, 3) and (images == images).all()


@pytest.mark.parametrize("name", ["tiny-sdxl", "tiny-flux"])
def test_lora_export_loads_into_the_models_pipeline(exported, pipes, tmp_path, name):
    """A LoRA run's `final/lora/` loads with the base pipeline's `load_lora_weights` (SDXL's
    U-Net keys, Flux's transformer keys) and then samples what the merged export samples."""
    import diffusers

    base_dir = exported[name][2]
    s = Settings.from_dict({"model": {"family": "diffusion", "path": f"builtin:{name}", "type": "lora", "lora_rank": 4,
                                      "lora_alpha": 8}, "data": {"resolution": 32, "cache_latents": False}})
    fam = DiffusionFamily(FamilyContext(settings=s, base_dir=tmp_path))
    torch.manual_seed(0)  # the same base weights as the exported full model
    model = fam.prepare_model(fam.build_model())
    with torch.no_grad():  # a trained adapter: lora_B moved off its zero start
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    fam.export(model.state_dict(), tmp_path / "final")
    assert json.loads((tmp_path / "final" / "tuner_diffusion.json").read_text())["lora"] == "lora"
    kw = {} if name == "tiny-sdxl" else {"max_sequence_length": T5_LEN}

    def sample(pipe):
        return pipe(PROMPTS[0], num_inference_steps=2, height=32, width=32, output_type="np",
                    generator=torch.Generator().manual_seed(0), **kw).images

    pipe = pipes[name]  # the base pipeline, DiffusionPipeline.from_pretrained(base_dir)
    before = sample(pipe)
    pipe.load_lora_weights(str(tmp_path / "final" / "lora"))
    try:
        after = sample(pipe)
    finally:
        pipe.unload_lora_weights()
    assert abs(after - before).max() > 1e-3
    torch.testing.assert_close(sample(pipe), before)  # unloaded: the shared pipeline is the base again
    merged = sample(diffusers.DiffusionPipeline.from_pretrained(str(tmp_path / "final")))
    assert abs(after - merged).max() < 1e-3


@pytest.mark.parametrize("name", ["tiny-sdxl", "tiny-flux"])
def test_a_pipeline_folder_trains_as_the_real_model(exported, tmp_path, name):
    """`model.path` = a local pipeline folder whose model_index.json names the pipeline (here
    the export, as a downloaded SDXL / FLUX.1 folder is laid out): the denoiser, every text
    encoder and tokenizer, the VAE and the scheduler come from it, and condition as the
    built-in they were exported from."""
    fam0, model0, final = exported[name]
    s = Settings.from_dict({"model": {"family": "diffusion", "path": str(final)},
                            "data": {"resolution": 32, "cache_latents": False}})
    fam = DiffusionFamily(FamilyContext(settings=s, base_dir=tmp_path))
    assert fam.pipeline_kind() == {"tiny-sdxl": "sdxl", "tiny-flux": "flux"}[name]
    model = fam.build_model()
    for k, v in model0.state_dict().items():
        torch.testing.assert_close(model.state_dict()[k], v)
    assert type(fam.scheduler()).__name__ == type(fam0.scheduler()).__name__
    assert type(fam.train_scheduler()).__name__ == type(fam0.train_scheduler()).__name__
    for got, want in zip(fam.conditioner()(PROMPTS, torch.device("cpu")),
                         fam0.conditioner()(PROMPTS, torch.device("cpu")), strict=True):
        torch.testing.assert_close(got, want)
    train, _ = _sets(fam)
    loss = fam.loss(model, _collate(fam, [train[i] for i in range(2)]), generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(loss) and fam._multiple() == fam0._multiple()
