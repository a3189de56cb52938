"""One registry of built-in models (`tuner.compiler.read.builtin_models`) that every command reads:
a built-in the runtime trains is one that `tuner estimate` and `tuner blocks` know.
(`tests/services/test_blocks.py` checks each entry against a real meta-device build.)"""

from __future__ import annotations

import pytest
from tuner.compiler.read import builtin_models
from tuner.runtime.families.base import FamilyError
from tuner.runtime.families.causal_lm import builtin_shape
from tuner.runtime.families.diffusion.denoiser import DEFAULT_BY_FLAVOUR, tiny_denoiser_config

from tests.conftest import run_tuner


def test_the_families_build_their_builtins_from_the_registry():
    """The families keep no table of their own: each built-in they build is the registry's
    entry (what the torch-free estimate and block cache trust), and a name the registry does
    not give their family is refused, listing the registry's names."""
    assert set(DEFAULT_BY_FLAVOUR.values()) <= set(builtin_models.names())
    for name in builtin_models.names():
        entry = builtin_models.get(name)
        if entry["family"] == "causal_lm":
            assert builtin_shape(name).items() <= entry["config"].items(), name
        elif entry["family"] == "diffusion":
            cfg = tiny_denoiser_config(name, resolution=24)
            assert cfg["sample_size"] == 24 and cfg["in_channels"] == 3  # pixel space, at data.resolution
            kept = {k: v for k, v in entry["config"].items()
                    if k not in ("sample_size", "in_channels", "out_channels", "pos_embed_max_size")}
            assert kept.items() <= cfg.items(), name
    with pytest.raises(FamilyError, match="tiny-llama"):
        builtin_shape("tiny-bert")
    with pytest.raises(FamilyError, match="tiny-unet"):
        tiny_denoiser_config("tiny-llama", resolution=16)


def test_estimate_and_blocks_accept_the_sd3_builtin_that_run_trains(tmp_path):
    settings = tmp_path / "settings.toml"
    settings.write_text('[model]\nfamily = "diffusion"\nflavour = "sd3"\npath = "builtin:tiny-sd3"\n'
                        '[data]\npath = "builtin"\n', encoding="utf-8")
    r = run_tuner("estimate", str(settings), cwd=tmp_path, env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "built-in tiny-sd3" in r.stdout
    b = run_tuner("blocks", "builtin:tiny-sd3", "--family", "diffusion", cwd=tmp_path, timeout=300,
                  env={"HF_HUB_OFFLINE": "1"})
    assert b.returncode == 0, b.stdout + b.stderr
    assert "JointTransformerBlock" in b.stdout
