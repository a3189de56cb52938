"""Contracts of the compiler: determinism, schema <-> code, no heavy imports, CLI replay."""

from __future__ import annotations

import json
import subprocess
import sys
import typing

import pytest
from jsonschema import Draft202012Validator
from tuner.compiler.compile import compile_file, compile_text
from tuner.compiler.keys.schema import index, load_schema
from tuner.compiler.keys.settings import Settings

from tests.conftest import EXAMPLES, SEEDS, run_tuner


def test_compiling_twice_gives_byte_identical_files(tmp_path):
    for example in ("zero3_nvme", "fsdp2", "multi_node"):
        settings = tmp_path / f"{example}.toml"
        settings.write_text((EXAMPLES / f"{example}.toml").read_text())
        (tmp_path / "offload").mkdir(exist_ok=True)
        first = run_tuner("compile", str(settings), "--out", str(tmp_path / "a"))
        assert first.returncode == 0, first.stderr
        a = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
        assert run_tuner("compile", str(settings), "--out", str(tmp_path / "a")).returncode == 0
        assert {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()} == a


def test_schema_is_valid_draft_2020_12():
    Draft202012Validator.check_schema(load_schema())


_PY_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict,
             "null": type(None)}


def test_every_declared_default_has_the_declared_type():
    """Each key's declaration (compiler/keys/sections/) is consistent: its default is of its
    annotated type, it has help, and the typed settings' defaults are the schema's."""
    instance = Settings()
    for path, info in index().keys.items():
        types = info.prop["type"] if isinstance(info.prop["type"], list) else [info.prop["type"]]
        allowed = tuple(t for name in types for t in (_PY_TYPES[name] if isinstance(_PY_TYPES[name], tuple)
                                                      else (_PY_TYPES[name],)))
        assert isinstance(info.default, allowed), f"{path}: default {info.default!r} is not {types}"
        assert not (isinstance(info.default, bool) and bool not in allowed), f"{path}: a boolean default"
        assert info.description, f"{path} has no help"
        assert getattr(getattr(instance, info.section), info.name) == info.default
    assert list(typing.get_type_hints(Settings)) == list(load_schema()["properties"])


SEED_FLAGS = ["model_type", "model_family", "output_dir", "num_processes", "fsdp_enable", "fsdp_version",
              "fsdp_reshard_after_forward", "fsdp_state_dict_type", "fsdp_cpu_ram_efficient_loading",
              "fsdp_auto_wrap_policy", "fsdp_transformer_layer_cls_to_wrap", "context_parallel_size",
              "context_parallel_comm_strategy", "deepspeed_config", "offload_param_path", "mixed_precision",
              "gradient_accumulation_steps", "learning_rate", "gradient_checkpointing", "mrl_dims"]


def test_every_seed_flag_is_an_alias():
    aliases = index().aliases
    missing = [f for f in SEED_FLAGS if f not in aliases]
    assert not missing
    # and every `--flag` in the FSDP2 seed's flag reference is one of them
    seed = (SEEDS / "fsdp2_hi_cli_flag_reference.md").read_text(encoding="utf-8")
    import re
    for flag in set(re.findall(r"`--([a-z_]+)`", seed)):
        assert flag in aliases, flag


@pytest.mark.parametrize("command", ["compile", "import"])
def test_compile_and_import_never_import_heavy_packages(tmp_path, command):
    settings = tmp_path / "s.toml"
    settings.write_text((EXAMPLES / "zero2_offload.toml").read_text())
    ds = tmp_path / "ds.json"
    ds.write_text('{"zero_optimization": {"stage": 2}, "train_batch_size": "auto"}')
    argv = ["compile", str(settings)] if command == "compile" else ["import", str(ds), "-o", str(tmp_path / "o.toml")]
    code = (
        "import sys\n"
        "from tuner.commands.cli import main\n"
        f"rc = main({argv!r})\n"
        "heavy = sorted(m for m in ('torch', 'accelerate', 'deepspeed', 'textual', 'transformers', 'diffusers')"
        " if m in sys.modules)\n"
        "print('HEAVY', heavy, rc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY [] 0" in proc.stdout, proc.stdout + proc.stderr


def test_seed_cli_flags_replay_the_settings_file(tmp_path):
    """`tuner compile` with the seed's own flags gives what its settings file gives."""
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    flags = ["--model_type=full", "--model_family=sdxl", "--output_dir=/data/experiments/sdxl-fsdp2",
             "--fsdp_enable", "--fsdp_version=2", "--fsdp_state_dict_type=SHARDED_STATE_DICT",
             "--fsdp_auto_wrap_policy=TRANSFORMER_BASED_WRAP", "--num_processes=2", "--platform=cuda"]
    proc = run_tuner("compile", str(empty), "--out", str(tmp_path / "cli"), *flags)
    assert proc.returncode == 0, proc.stderr
    from_file = compile_file(EXAMPLES / "seed_sdxl_fsdp2.toml", out_dir=tmp_path / "cli")
    assert (tmp_path / "cli" / "accelerate.yaml").read_text() == from_file.accelerate_yaml
    cli_settings = json.loads((tmp_path / "cli" / "manifest.json").read_text())["settings"]
    assert cli_settings == from_file.manifest["settings"]


def test_set_overrides_win_over_the_file_and_unknown_ones_are_errors():
    r = compile_text("fsdp_enable = true\nfsdp_version = 1\n", ["fsdp_version=2", "fsdp.reshard_after_forward=false"])
    assert r.ok and r.settings.fsdp.version == 2 and r.settings.fsdp.reshard_after_forward is False
    r = compile_text("", ["fsdp_verison=2"])
    (err,) = r.diagnostics.errors
    assert "did you mean fsdp_version" in err.fix


def test_a_former_or_misspelt_key_as_a_flag_gets_the_compilers_diagnostic(tmp_path):
    """`--load_in_4bit` (a key model.base_precision replaced) and `--fsdp_verison 2` are read as
    --set overrides: the diagnostic names what to write, not argparse's "unrecognized arguments"."""
    settings = tmp_path / "s.toml"
    settings.write_text('[hardware]\nplatform = "cpu"\n')
    former = run_tuner("compile", "--load_in_4bit", str(settings), "-q")
    assert former.returncode == 1, former.stderr
    assert 'model.base_precision = "nf4-bnb"' in former.stderr and "unrecognized" not in former.stderr
    misspelt = run_tuner("compile", str(settings), "--fsdp_verison", "2", "-q")
    assert misspelt.returncode == 1 and "did you mean fsdp_version" in misspelt.stderr, misspelt.stderr
    assert not (tmp_path / "build").exists()
    # the word after the flag is its value, unless it is the settings file or an existing folder
    assert run_tuner("compile", str(settings), "-q").returncode == 0
    built = run_tuner("run", "--load_in_4bit", str(tmp_path / "build"))
    assert built.returncode == 2 and "this is a build directory" in built.stderr, built.stderr


def test_base_accelerate_config_keeps_the_users_other_keys(tmp_path):
    base = tmp_path / "default_config.yaml"
    base.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: 8\n"
                    "gpu_ids: 0,1,2,3,4,5,6,7\nmain_training_function: my_main\nenable_cpu_affinity: true\n"
                    "deepspeed_config:\n  zero_stage: 1\n  gradient_accumulation_steps: 4\n  zero3_init_flag: false\n")
    r = compile_text(f"base = '{base}'\nnum_processes = 8\n[deepspeed]\nenabled = true\nzero_stage = 2\n",
                     path=tmp_path / "s.toml")
    assert r.ok, [d.format() for d in r.diagnostics.errors]
    import yaml
    cfg = yaml.safe_load(r.accelerate_yaml)
    assert cfg["main_training_function"] == "my_main" and cfg["enable_cpu_affinity"] is True  # kept
    assert cfg["distributed_type"] == "DEEPSPEED"
    assert "zero_stage" not in cfg["deepspeed_config"]  # forbidden beside deepspeed_config_file
    assert cfg["deepspeed_config"]["deepspeed_config_file"].endswith("deepspeed.json")
