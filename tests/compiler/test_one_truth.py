"""One truth per key (issue 24): renaming a key in its declaration is the only edit needed for
the schema, the compile (normalise: aliases, coercion, defaults, validation), emit, import and
the wizard's layout to follow. A test-only declaration table, declared like
compiler/keys/sections/, drives a tiny compile end to end under two names for the same keys."""

from __future__ import annotations

import tomllib
from dataclasses import field, make_dataclass
from typing import Literal

import pytest
import yaml
from jsonschema import Draft202012Validator
from tuner.compiler.artefacts.emit import declared_values, render_yaml
from tuner.compiler.canonical.normalise import normalise
from tuner.compiler.diagnostics import Diagnostics
from tuner.compiler.keys import spellings
from tuner.compiler.keys.declare import sections, setting
from tuner.compiler.keys.schema import accelerate_names, index_of
from tuner.compiler.keys.schema_gen import input_schema, settings_schema
from tuner.tui.layout import _main_keys


def declaration(ranks: str, offload: str) -> type:
    """Two sections of four keys; `ranks` and `offload` name two of them."""
    hardware = make_dataclass("TinyHardware", [
        (ranks, int, setting(1, "Ranks.", aliases=("num_ranks",), minimum=1, accelerate=("num_processes",), order=0)),
        ("precision", Literal["no", "bf16"], setting("no", "Precision.", spellings=spellings.precision,
                                   accelerate=("mixed_precision",), order=1)),
        ("layers", list[str], setting([], "Layers.")),
    ], namespace={"title": "Hardware", "step": "hardware"})
    fsdp = make_dataclass("TinyFsdp", [
        (offload, bool, setting(False, "Offload.", accelerate=("fsdp_config.fsdp_offload_params",))),
        ("state", Literal["sharded", "full"], setting("sharded", "State dict.", spellings=spellings.STATE_DICT,
                               accelerate=("fsdp_config.fsdp_state_dict_type",),
                               accelerate_values={"sharded": "SHARDED_STATE_DICT", "full": "FULL_STATE_DICT"},
                               step="checkpoints", order=0)),
    ], namespace={"title": "FSDP", "step": "sharding"})
    return make_dataclass("TinySettings", [("hardware", hardware, field(default_factory=hardware)),
                                           ("fsdp", fsdp, field(default_factory=fsdp))])


def tiny_compile(root: type, text: str) -> tuple[dict, str]:
    """settings text -> (normalised settings, accelerate YAML), through the compiler's own
    normalise and emit, for the declaration `root`."""
    diags = Diagnostics()
    n = normalise(tomllib.loads(text), diags, root=root)
    assert not diags.errors, [d.format() for d in diags.errors]
    typed = root(**{name: cls(**n.settings[name]) for name, cls in sections(root).items()})
    cfg = {**declared_values(typed, "", root), "fsdp_config": declared_values(typed, "fsdp_config", root)}
    return n.settings, render_yaml(cfg)


def import_back(root: type, text: str) -> dict:
    """accelerate YAML -> settings, through the importer's name tables and normalise's spellings."""
    cfg = yaml.safe_load(text)
    nested: dict[str, dict] = {}
    for block, values in (("", cfg), ("fsdp_config", cfg["fsdp_config"])):
        for name, path in accelerate_names(block, root).items():
            section, key = path.split(".")
            nested.setdefault(section, {})[key] = values[name]
    return normalise(nested, Diagnostics(), root=root).settings


@pytest.mark.parametrize("ranks,offload", [("ranks", "offload"), ("world_size", "offload_params")])
def test_a_renamed_key_is_followed_everywhere(ranks, offload):
    root = declaration(ranks, offload)
    # schema: the canonical and the editor schema name the key as declared
    schema = settings_schema(root)
    Draft202012Validator.check_schema(schema)
    assert list(schema["properties"]["hardware"]["properties"]) == [ranks, "precision", "layers"]
    assert schema["properties"]["hardware"]["properties"][ranks]["default"] == 1
    assert offload in input_schema(root)["properties"]["fsdp"]["properties"]
    # compile: the declared name and its alias, coerced by the declared type, defaults filled in
    text = f'[hardware]\n{ranks} = "4"\nprecision = "BF16"\n[fsdp]\n{offload} = "yes"\nstate = "FULL_STATE_DICT"\n'
    settings, emitted = tiny_compile(root, text)
    assert settings == {"hardware": {ranks: 4, "precision": "bf16", "layers": []},
                        "fsdp": {offload: True, "state": "full"}}
    assert tiny_compile(root, text.replace(f"{ranks} = ", "num_ranks = "))[1] == emitted
    # emit: accelerate's names, as declared
    assert yaml.safe_load(emitted) == {"num_processes": 4, "mixed_precision": "bf16", "fsdp_config": {
        "fsdp_offload_params": True, "fsdp_state_dict_type": "FULL_STATE_DICT"}}
    # import: the same tables read it back to the same settings
    assert import_back(root, emitted) == settings
    # wizard: each step's main fields, in the declared order (a key may sit off its section's step)
    idx = index_of(root)
    assert _main_keys("hardware", idx) == (f"hardware.{ranks}", "hardware.precision")
    assert _main_keys("checkpoints", idx) == ("fsdp.state",)
    assert idx.keys[f"fsdp.{offload}"].step == "sharding"


def test_the_old_name_is_refused_after_a_rename():
    diags = Diagnostics()
    normalise({"hardware": {"ranks": 2}}, diags, root=declaration("world_size", "offload"))
    assert [d.key for d in diags.errors] == ["hardware.ranks"]
    defaults = normalise({}, Diagnostics(), root=declaration("world_size", "offload")).settings
    assert defaults["hardware"] == {"world_size": 1, "precision": "no", "layers": []}
