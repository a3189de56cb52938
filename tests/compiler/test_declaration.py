"""The one declaration (compiler/sections/) is what emit, the importer and normalise use:
accelerate's names and value spellings are declared once per key, and both directions
(settings -> accelerate YAML -> settings) come from that one fact."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import EXAMPLES
from tuner.compiler import compile_file
from tuner.compiler.formats import accelerate as accelerate_format
from tuner.compiler.schema import accelerate_names, index


def _with_values():
    return [(p, i.setting.accelerate_values) for p, i in index().keys.items() if i.setting.accelerate_values]


@pytest.mark.parametrize("path,values", _with_values(), ids=[p for p, _ in _with_values()])
def test_accelerate_value_spellings_read_back_to_the_canonical_value(path, values):
    """emit writes accelerate's spelling; the key's declared spellings read it back."""
    normalise_value = index().keys[path].setting.spellings
    for canonical, written in values.items():
        assert normalise_value(written) == canonical, f"{path}: {written!r} does not read back as {canonical!r}"


def test_the_importer_reads_exactly_the_declared_accelerate_names():
    assert accelerate_format.FSDP_KEYS.items() <= accelerate_names("fsdp_config").items()
    assert accelerate_format.DS_YAML_KEYS == accelerate_names("deepspeed_config")
    assert accelerate_format.TOP.items() <= accelerate_names("").items()
    assert set(accelerate_format.CP_KEYS) == set(accelerate_names("parallelism_config"))


@pytest.mark.parametrize("example", ["fsdp2", "fsdp2_context_parallel", "zero3_nvme"])
def test_every_emitted_setting_name_is_declared(example, monkeypatch):
    """Each key of the accelerate YAML's fsdp_config, and each parallelism_config_cp_* key,
    is a declared `accelerate=` name: a new emitted key needs its declaration (and so the
    importer reads it back)."""
    monkeypatch.setenv("TUNER_PLATFORM", "cuda")
    result = compile_file(EXAMPLES / f"{example}.toml", out_dir=EXAMPLES / "build")
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    cfg = yaml.safe_load(result.files["accelerate.yaml"])
    assert set(cfg.get("fsdp_config", {})) <= set(accelerate_names("fsdp_config"))
    cp = {k for k in cfg.get("parallelism_config", {}) if k.startswith("parallelism_config_cp_")}
    assert cp <= set(accelerate_names("parallelism_config"))
    for name, path in accelerate_names("").items():
        if name in cfg:
            section, key = path.split(".")
            assert cfg[name] == getattr(getattr(result.settings, section), key), name
