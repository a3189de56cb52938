"""One registry of built-in models (`tuner.compiler.builtin_models`) that every command reads:
a built-in the runtime trains is one that `tuner estimate` and `tuner blocks` know.
(`tests/services/test_blocks.py` checks each entry against a real meta-device build.)"""

from __future__ import annotations

from tests.conftest import run_tuner
from tuner.compiler import builtin_models
from tuner.runtime.families.causal_lm import BUILTIN as CAUSAL_LM_BUILTIN
from tuner.runtime.families.diffusion.denoiser import DEFAULT_BY_FLAVOUR


def test_every_builtin_the_runtime_builds_is_in_the_registry():
    """Until the families read the registry alone, their own tables must name only its models,
    with its shapes (the registry is what the torch-free estimate and block cache trust)."""
    names = set(builtin_models.names())
    assert set(DEFAULT_BY_FLAVOUR.values()) <= names
    for name, shape in CAUSAL_LM_BUILTIN.items():
        config = builtin_models.config_dict(name)
        assert {k: config[k] for k in shape} == shape, name


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
