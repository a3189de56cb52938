"""The diffusion export is a diffusers pipeline folder: `DiffusionPipeline.from_pretrained`
loads it (model_index.json and the component folders) and one inference step runs on CPU.
In-process, no ranks: the family exports the state dict of a model it built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tuner.compiler.keys.settings import Settings
from tuner.runtime.families.base import FamilyContext
from tuner.runtime.families.diffusion.family import DiffusionFamily
from tuner.runtime.families.text import build_tiny_tokenizer


def _family(tmp_path: Path, path: str, resolution: int = 32) -> DiffusionFamily:
    s = Settings.from_dict({"model": {"family": "diffusion", "path": path}, "data": {"resolution": resolution}})
    return DiffusionFamily(FamilyContext(settings=s, base_dir=tmp_path))


def _export(fam: DiffusionFamily, out: Path):
    torch.manual_seed(0)
    model = fam.build_model()
    fam.export(model.state_dict(), out)
    return model


@pytest.mark.parametrize("builtin", ["tiny-unet", "tiny-dit"])  # tiny-sd3: test_diffusion_real_models.py
def test_builtin_export_loads_as_a_pipeline_and_samples(tmp_path, builtin):
    from diffusers import DiffusionPipeline

    out = tmp_path / "final"
    model = _export(_family(tmp_path, f"builtin:{builtin}"), out)
    index = json.loads((out / "model_index.json").read_text())
    assert index["_class_name"] == ["tuner_pipeline", "TunerPipeline"]
    pipe = DiffusionPipeline.from_pretrained(str(out), trust_remote_code=True)
    denoiser = pipe.unet if builtin == "tiny-unet" else pipe.transformer
    assert (pipe.text_encoder is None) == (builtin == "tiny-dit")  # DiT: class labels, no text
    for k, v in model.state_dict().items():
        torch.testing.assert_close(denoiser.state_dict()[k], v)
    images = pipe("a red circle on a white background", num_inference_steps=1, output_type="pt")
    assert tuple(images.shape) == (1, 3, 32, 32) and torch.isfinite(images).all()
    assert pipe(["a", "b"], num_inference_steps=1)[1].size == (32, 32)  # PIL images


def _tiny_sd_folder(folder: Path) -> None:
    """A Stable-Diffusion-shaped folder (latent U-Net, VAE, CLIP text encoder, tokenizer), tiny, built here."""
    from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    UNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
                         block_out_channels=(16, 32), down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                         up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=16,
                         attention_head_dim=4, norm_num_groups=8).save_pretrained(folder / "unet")
    AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                  up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16), latent_channels=4,
                  norm_num_groups=8, sample_size=16).save_pretrained(folder / "vae")
    tok = build_tiny_tokenizer()
    tok.model_max_length = 16
    tok.save_pretrained(str(folder / "tokenizer"))
    CLIPTextModel(CLIPTextConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, max_position_embeddings=16, pad_token_id=tok.pad_token_id,
                                 bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)
                  ).save_pretrained(folder / "text_encoder")
    DDPMScheduler(num_train_timesteps=100, steps_offset=1, clip_sample=False).save_pretrained(folder / "scheduler")


def test_stable_diffusion_shaped_export_loads_as_stable_diffusion_pipeline(tmp_path):
    from diffusers import DiffusionPipeline, StableDiffusionPipeline

    _tiny_sd_folder(tmp_path / "sd")
    out = tmp_path / "final"
    model = _export(_family(tmp_path, "sd", resolution=16), out)
    assert json.loads((out / "model_index.json").read_text())["_class_name"] == "StableDiffusionPipeline"
    assert not (out / "tuner_pipeline.py").exists()
    pipe = DiffusionPipeline.from_pretrained(str(out))  # no remote code: diffusers' own pipeline
    assert isinstance(pipe, StableDiffusionPipeline)
    torch.testing.assert_close(pipe.unet.state_dict()["conv_in.weight"], model.state_dict()["conv_in.weight"])
    images = pipe("a red square", num_inference_steps=1, guidance_scale=1.0, output_type="np").images
    assert images.shape == (1, 16, 16, 3)


def test_lora_export_loads_with_diffusers_load_lora_weights_and_changes_the_output(tmp_path):
    """A LoRA run's `final/lora/` is diffusers' format: the base model's StableDiffusionPipeline
    takes it with `load_lora_weights`, and then samples what the merged export samples."""
    from diffusers import AutoencoderKL, DDPMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import AutoTokenizer, CLIPTextModel

    sd = tmp_path / "sd"
    _tiny_sd_folder(sd)
    s = Settings.from_dict({"model": {"family": "diffusion", "path": "sd", "type": "lora", "lora_rank": 4,
                                      "lora_alpha": 8}, "data": {"resolution": 16}})
    fam = DiffusionFamily(FamilyContext(settings=s, base_dir=tmp_path))
    torch.manual_seed(0)
    model = fam.prepare_model(fam.build_model())
    with torch.no_grad():  # a trained adapter: lora_B moved off its zero start
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    out = tmp_path / "final"
    fam.export(model.state_dict(), out)
    assert json.loads((out / "tuner_diffusion.json").read_text())["lora"] == "lora"
    assert (out / "lora" / "pytorch_lora_weights.safetensors").is_file()

    def sample(pipe):
        return pipe("a red square", num_inference_steps=2, guidance_scale=1.0, height=16, width=16, output_type="np",
                    generator=torch.Generator().manual_seed(0)).images

    base = StableDiffusionPipeline(vae=AutoencoderKL.from_pretrained(sd / "vae"),
                                   text_encoder=CLIPTextModel.from_pretrained(sd / "text_encoder"),
                                   tokenizer=AutoTokenizer.from_pretrained(sd / "tokenizer"),
                                   unet=UNet2DConditionModel.from_pretrained(sd / "unet"),
                                   scheduler=DDPMScheduler.from_pretrained(sd / "scheduler"), safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)
    before = sample(base)
    base.load_lora_weights(str(out / "lora"))
    after = sample(base)
    assert abs(after - before).max() > 1e-3  # the adapter changes the images
    merged = sample(StableDiffusionPipeline.from_pretrained(str(out)))
    assert abs(after - merged).max() < 1e-3  # ...into what the merged export gives (rank and alpha kept)
