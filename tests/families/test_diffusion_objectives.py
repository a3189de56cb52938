"""The objectives SimpleTuner's users set, in-process: the keys under SimpleTuner's flag names,
the compiler's refusals (min-SNR on flow matching, flow keys on DDPM), the fixed and
resolution-dependent shift, logit-normal sampling, min-SNR-γ weights and noise offset."""

from __future__ import annotations

import math

import pytest
import torch
from tuner.compiler.compile import compile_text
from tuner.compiler.keys.settings import Settings
from tuner.runtime.families.base import FamilyContext
from tuner.runtime.families.diffusion.family import DiffusionFamily
from tuner.runtime.families.diffusion.objectives import Objective, flow_sigmas, offset_noise


def _compile(model: str, training: str):
    text = f'[model]\nfamily = "diffusion"\npath = "builtin:{model}"\n[hardware]\nplatform = "cpu"\n[training]\n{training}\n'
    return compile_text(text, host_facts=False)


def test_simpletuner_flag_names_are_the_keys_aliases():
    r = _compile("tiny-sd3", "flow_schedule_shift = 3.0\nflow_schedule_auto_shift = true\n"
                             "flow_timestep_sampling = \"logit_normal\"\nflow_logit_mean = -0.5\nflow_logit_std = 0.8\n"
                             "noise_offset = 0.05")
    assert r.ok, [d.format() for d in r.diagnostics.items]
    t = r.settings.training
    assert (t.flow_shift, t.flow_auto_shift, t.timestep_sampling, t.logit_mean, t.logit_std, t.noise_offset) == (
        3.0, True, "logit_normal", -0.5, 0.8, 0.05)
    r = _compile("tiny-unet", "snr_gamma = 5.0")
    assert r.ok and r.settings.training.snr_gamma == 5.0


@pytest.mark.parametrize("model,training,key,words", [
    ("tiny-sd3", "snr_gamma = 5.0", "training.snr_gamma", "flow matching"),
    ("tiny-dit", "snr_gamma = 1.0", "training.snr_gamma", "flow matching"),
    ("tiny-unet", "flow_schedule_shift = 3.0", "training.flow_shift", "DDPM"),
    ("tiny-unet", "timestep_sampling = \"logit_normal\"", "training.timestep_sampling", "DDPM"),
])
def test_the_compiler_refuses_an_objective_the_model_cannot_use(model, training, key, words):
    r = _compile(model, training)
    errors = [d for d in r.diagnostics.items if d.severity == "error"]
    assert not r.ok and [e.key for e in errors] == [key]
    assert words in errors[0].message and errors[0].fix


def test_shift_fixed_and_by_resolution():
    u = flow_sigmas(Objective(), 1000, (32, 32), torch.Generator().manual_seed(0))
    s3 = flow_sigmas(Objective(shift=3.0), 1000, (32, 32), torch.Generator().manual_seed(0))
    torch.testing.assert_close(s3, 3 * u / (1 + 2 * u))
    assert s3.mean() > u.mean() + 0.1  # shift > 1 trains noisier
    small, large = (Objective(auto_shift=True, patch=2).shift_for(hw) for hw in ((32, 32), (128, 128)))
    assert math.isclose(small, math.exp(0.5), rel_tol=1e-6)  # 256 tokens: Flux's base shift
    assert math.isclose(large, math.exp(1.15), rel_tol=1e-6)  # 4096 tokens: its max shift
    lo = flow_sigmas(Objective(auto_shift=True, patch=2), 2000, (32, 32), torch.Generator().manual_seed(1))
    hi = flow_sigmas(Objective(auto_shift=True, patch=2), 2000, (128, 128), torch.Generator().manual_seed(1))
    assert hi.mean() > lo.mean()


def test_logit_normal_sampling():
    s = flow_sigmas(Objective(sampling="logit_normal", logit_mean=-1.0, logit_std=0.5), 20000, (8, 8),
                    torch.Generator().manual_seed(0))
    logit = torch.log(s / (1 - s))
    assert abs(float(logit.mean()) + 1.0) < 0.03 and abs(float(logit.std()) - 0.5) < 0.03


def test_noise_offset_shifts_each_image_channel():
    noise = torch.zeros(64, 4, 8, 8)
    out = offset_noise(Objective(noise_offset=0.1), noise, torch.Generator().manual_seed(0))
    per_channel = out.flatten(2)
    assert torch.all(per_channel.std(-1) == 0)  # a constant per image and channel
    assert 0.07 < float(per_channel[..., 0].std()) < 0.13
    assert offset_noise(Objective(), noise) is noise


def test_min_snr_gamma_weights_the_epsilon_loss(tmp_path):
    def family(**training):
        s = Settings.from_dict({"model": {"family": "diffusion", "path": "builtin:tiny-unet"},
                                "data": {"resolution": 16}, "training": training})
        return DiffusionFamily(FamilyContext(settings=s, base_dir=tmp_path))

    plain, snr = family(), family(snr_gamma=5.0)
    x0 = torch.randn(64, 3, 16, 16)
    _, t, _, none = plain.noisy_inputs(x0, torch.Generator().manual_seed(0))
    _, t2, _, w = snr.noisy_inputs(x0, torch.Generator().manual_seed(0))
    assert none is None and torch.equal(t, t2)
    ac = snr.scheduler().alphas_cumprod[t]
    ratio = ac / (1 - ac)
    torch.testing.assert_close(w, torch.clamp(ratio, max=5.0) / ratio)
    assert torch.all(w[ratio > 5] < 1) and torch.all(w[ratio <= 5] == 1)  # low noise down-weighted only
    torch.manual_seed(0)
    model = snr.build_model()
    batch = {"latents": x0[:4], "labels": torch.zeros(4, dtype=torch.long), "hidden": torch.zeros(4, 64, 32),
             "pooled": torch.zeros(4, 32)}
    lw = snr.loss(model, batch, torch.Generator().manual_seed(2))
    lp = plain.loss(model, batch, torch.Generator().manual_seed(2))
    assert lw < lp  # the same draws, weighted at most 1
