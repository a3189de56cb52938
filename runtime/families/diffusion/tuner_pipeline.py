"""Sampling around any denoiser tuner trains, and `TunerPipeline`, the diffusers pipeline of
an export that has no standard diffusers pipeline (the built-in pixel-space models).

Self-contained on purpose: export copies this file into the exported folder as
``tuner_pipeline.py`` and names it in ``model_index.json``, so
``DiffusionPipeline.from_pretrained(folder, trust_remote_code=True)`` loads the export
without tuner installed. It imports only torch, diffusers and (for images) PIL.
"""

from __future__ import annotations

from typing import Any

from diffusers import DiffusionPipeline


def kind_of(class_name: str, config: dict[str, Any] | None = None) -> str:
    """How a denoiser is called: 'unet', 'sdxl' (a U-Net with added time ids and pooled text,
    `config`'s ``addition_embed_type = "text_time"``), 'sd3' (text + pooled), 'flux' (packed
    latents, ids, guidance) or 'dit' (class labels)."""
    if "UNet" in class_name:
        return "sdxl" if (config or {}).get("addition_embed_type") == "text_time" else "unet"
    if "Flux" in class_name:
        return "flux"
    if class_name.startswith("SD3"):
        return "sd3"
    if class_name.startswith("DiT"):
        return "dit"
    return "unet"


def denoise(model, kind: str, x, t, cond: dict[str, Any]):
    """One denoiser call in the form its class expects; returns the prediction tensor."""
    if kind == "unet":
        out = model(x, t, encoder_hidden_states=cond["hidden"])
    elif kind == "sdxl":
        out = model(x, t, encoder_hidden_states=cond["hidden"],
                    added_cond_kwargs={"text_embeds": cond["pooled"], "time_ids": cond["time_ids"]})
    elif kind == "flux":
        return flux_denoise(model, x, t, cond)
    elif kind == "sd3":
        out = model(hidden_states=x, encoder_hidden_states=cond["hidden"], pooled_projections=cond["pooled"],
                    timestep=t)
    else:
        out = model(x, timestep=t, class_labels=cond["labels"])
    return out.sample if hasattr(out, "sample") else out[0]


def flux_denoise(model, x, t, cond: dict[str, Any]):
    """Flux's call as ``FluxPipeline`` makes it: latents packed into 2x2 patches, image ids of
    the packed grid, zero text ids, timestep in [0, 1] (`t` is in [0, 1000]), the guidance
    embedding (``cond["guidance"]``, else 1.0) when the model has one; the packed prediction
    unpacked to the latent's shape."""
    import torch
    from diffusers import FluxPipeline

    n, c, h, w = x.shape
    packed = FluxPipeline._pack_latents(x, n, c, h, w)
    img_ids = FluxPipeline._prepare_latent_image_ids(n, h // 2, w // 2, x.device, x.dtype)
    hidden = cond["hidden"]
    txt_ids = torch.zeros(hidden.shape[1], 3, device=x.device, dtype=x.dtype)
    config = getattr(getattr(model, "module", model), "config", None)
    guidance = None
    if getattr(config, "guidance_embeds", False):
        guidance = cond.get("guidance")
        guidance = torch.full((n,), 1.0, device=x.device) if guidance is None else guidance
    out = model(hidden_states=packed, timestep=(t / 1000).to(x.dtype), guidance=guidance,
                pooled_projections=cond["pooled"], encoder_hidden_states=hidden, txt_ids=txt_ids, img_ids=img_ids,
                return_dict=False)[0]
    return FluxPipeline._unpack_latents(out, h, w, 1)


def encode_text(tokenizer, text_encoder, prompts: list[str], max_length: int, device):
    """(hidden states, pooled embedding) of `prompts`, without gradients."""
    import torch

    enc = tokenizer(list(prompts), padding="max_length", truncation=True, max_length=max_length,
                    return_tensors="pt")
    with torch.no_grad():
        out = text_encoder(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device))
    pooled = getattr(out, "text_embeds", None)
    if pooled is None:
        pooled = getattr(out, "pooler_output", out.last_hidden_state[:, 0])
    return out.last_hidden_state, pooled


def sample(denoiser, kind: str, scheduler, encode, vae, prompts: list[str], labels: list[int] | None, height: int,
           width: int, num_inference_steps: int, seed: int, device):
    """Images in [0, 1] (``[n, 3, h, w]``, on CPU); `encode(prompts, device)` gives
    (hidden, pooled), or is None for class-conditional denoisers. Pixel space when `vae` is None."""
    import torch

    n = len(prompts)
    cond: dict[str, Any] = {"labels": torch.tensor(labels or [0] * n, device=device)}
    if encode is not None:
        cond["hidden"], cond["pooled"] = encode(prompts, device)
    if kind == "sdxl":  # original size = target size, no crop (the SDXL pipeline's defaults)
        cond["time_ids"] = torch.tensor([[height, width, 0, 0, height, width]] * n, dtype=torch.float32, device=device)
    channels, factor = 3, 1
    if vae is not None:
        channels = vae.config.latent_channels
        factor = 2 ** (len(vae.config.block_out_channels) - 1)
    gen = torch.Generator("cpu").manual_seed(seed)
    x = torch.randn((n, channels, height // factor, width // factor), generator=gen).to(device)
    extra = {}
    if getattr(scheduler.config, "use_dynamic_shifting", False):  # Flux: mu from the image's token count
        tokens, c = (height // factor // 2) * (width // factor // 2), scheduler.config
        slope = (c.max_shift - c.base_shift) / (c.max_image_seq_len - c.base_image_seq_len)
        extra["mu"] = tokens * slope + c.base_shift - slope * c.base_image_seq_len
    scheduler.set_timesteps(num_inference_steps, device=device, **extra)
    x = x * getattr(scheduler, "init_noise_sigma", 1.0)
    for t in scheduler.timesteps:
        inp = scheduler.scale_model_input(x, t) if hasattr(scheduler, "scale_model_input") else x
        with torch.no_grad():
            pred = denoise(denoiser, kind, inp, t.expand(n).to(device), cond)
        x = scheduler.step(pred.float(), t, x, return_dict=False)[0]
    if vae is not None:
        with torch.no_grad():
            x = vae.decode(x / vae.config.scaling_factor + (getattr(vae.config, "shift_factor", None) or 0.0)).sample
    return ((x.float().clamp(-1, 1) + 1) / 2).cpu()


def to_pil(images) -> list:
    from PIL import Image

    arr = (images.permute(0, 2, 3, 1).numpy() * 255).round().astype("uint8")
    return [Image.fromarray(a) for a in arr]


class TunerPipeline(DiffusionPipeline):
    """Text- (or class-) to-image sampling with an exported tuner denoiser (``unet`` or
    ``transformer``), its scheduler, and optionally ``text_encoder`` + ``tokenizer`` and ``vae``."""

    _optional_components = ["unet", "transformer", "text_encoder", "tokenizer", "vae"]

    def __init__(self, scheduler, unet=None, transformer=None, text_encoder=None, tokenizer=None, vae=None) -> None:
        super().__init__()
        self.register_modules(scheduler=scheduler, unet=unet, transformer=transformer, text_encoder=text_encoder,
                              tokenizer=tokenizer, vae=vae)

    @property
    def denoiser(self):
        return self.unet if self.unet is not None else self.transformer

    def __call__(self, prompt: str | list[str] = "", num_inference_steps: int = 12, height: int | None = None,
                 width: int | None = None, class_labels: list[int] | None = None, seed: int = 0,
                 output_type: str = "pil"):
        denoiser = self.denoiser
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        size = int(getattr(denoiser.config, "sample_size", 32) or 32)
        if self.vae is not None:
            size *= 2 ** (len(self.vae.config.block_out_channels) - 1)
        device = next(denoiser.parameters()).device
        encode = None
        if self.text_encoder is not None:
            max_len = min(int(getattr(self.tokenizer, "model_max_length", 77) or 77), 77,
                          int(getattr(self.text_encoder.config, "max_position_embeddings", 77)))

            def encode(ps, dev):
                return encode_text(self.tokenizer, self.text_encoder, ps, max_len, dev)

        kind = kind_of(type(denoiser).__name__, dict(denoiser.config))
        images = sample(denoiser, kind, self.scheduler, encode, self.vae, prompts, class_labels, height or size,
                        width or size, num_inference_steps, seed, device)
        return images if output_type == "pt" else to_pil(images)
