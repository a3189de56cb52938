"""Special files, deep nesting, corrupt caches and the other traceback classes of issue 11,
each through the real command line (in-process), each ending with a message and exit code."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tuner.compiler.diagnostics import EXIT_INVALID, EXIT_OK, EXIT_USAGE

from tests.reliability.rel_helpers import EXAMPLES, assert_honest, tuner

DEEP_JSON = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def fifo(tmp_path) -> Path:
    p = tmp_path / "fifo"
    os.mkfifo(p)
    return p


def _special(kind: str, tmp_path: Path, fifo: Path) -> Path:
    return {"fifo": fifo, "zero": Path("/dev/zero"), "dir": tmp_path}[kind]


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
def test_special_file_as_settings(tmp_path, fifo, kind):
    code, out, err = tuner("compile", _special(kind, tmp_path, fifo), timeout_s=10)
    assert code == EXIT_USAGE and ("not a regular file" in err or "is a directory" in err), err


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
@pytest.mark.parametrize("key", ["accelerate.base", "deepspeed.config"])
def test_special_file_as_base_or_deepspeed_config(tmp_path, fifo, kind, key):
    section, name = key.split(".")
    settings = tmp_path / "s.toml"
    settings.write_text(f'[hardware]\nplatform = "cpu"\n[{section}]\n{name} = "{_special(kind, tmp_path, fifo)}"\n')
    code, out, err = tuner("compile", settings, "--out", tmp_path / "b", timeout_s=10)
    assert code == EXIT_INVALID and f"[{key}]" in err and ("not a regular file" in err or "directory" in err), err


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
def test_special_file_as_import_source(tmp_path, fifo, kind):
    code, out, err = tuner("import", _special(kind, tmp_path, fifo), "-o", tmp_path / "x.toml", timeout_s=10)
    assert code == EXIT_USAGE and ("not a regular file" in err or "is a directory" in err), err
    assert not (tmp_path / "x.toml").exists()


def test_oversized_settings_are_refused(tmp_path):
    big = tmp_path / "big.toml"
    with open(big, "wb") as fh:
        fh.truncate(64 * 1024 * 1024)  # sparse: costs no disk
    code, out, err = tuner("compile", big)
    assert code == EXIT_USAGE and "the limit is" in err


# --- deep nesting -------------------------------------------------------------------------

def test_deeply_nested_settings(tmp_path):
    for text in ("a = " + "[" * 5000 + "]" * 5000, "x" + ".y" * 5000 + " = 1", "a = " + "{b = " * 3000 + "1" + "}" * 3000):
        p = tmp_path / "deep.toml"
        p.write_text(text)
        code, out, err = tuner("compile", p)
        assert code == EXIT_INVALID and "levels deep" in err, err[-500:]
    code, out, err = tuner("compile", EXAMPLES / "zero1.toml", "--out", tmp_path / "b",
                           "--set", "deepspeed_config=" + "{a=" * 3000 + "1" + "}" * 3000)
    assert code == EXIT_INVALID and "levels deep" in err


def test_deeply_nested_deepspeed_json_base_yaml_and_model_config(tmp_path):
    (tmp_path / "ds.json").write_text(DEEP_JSON)
    (tmp_path / "base.yaml").write_text("a: " + "[" * 5000 + "]" * 5000)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama", "x": ' + DEEP_JSON + "}")
    for extra in ('[deepspeed]\nconfig = "ds.json"\n', '[accelerate]\nbase = "base.yaml"\n'):
        s = tmp_path / "s.toml"
        s.write_text('[hardware]\nplatform = "cpu"\n' + extra)
        code, out, err = tuner("compile", s, "--out", tmp_path / "b")
        assert code == EXIT_INVALID and "levels deep" in err, err
    s.write_text(f'[model]\npath = "{model}"\n[hardware]\nplatform = "cpu"\n')
    code, out, err = tuner("compile", s, "--out", tmp_path / "b")
    assert_honest(code, out, err)
    code, out, err = tuner("estimate", s)
    assert_honest(code, out, err)
    assert "levels deep" in out + err


# --- numbers ------------------------------------------------------------------------------

def test_numbers_are_finite_in_range_and_integral(tmp_path):
    s = tmp_path / "s.toml"
    s.write_text('[hardware]\nplatform = "cpu"\ngpu_memory_gib = inf\nnum_processes = 2.0\n'
                 "[deepspeed]\nenabled = true\nzero_stage = true\n"
                 "[training]\nmicro_batch_size = 1e19\nlearning_rate = nan\nseed = 100000000000000000000\n")
    code, out, err = tuner("compile", s, "--format", "json", "--out", tmp_path / "b")
    assert code == EXIT_INVALID
    errors = {d["key"]: d["message"] for d in json.loads(out)["diagnostics"] if d["severity"] == "error"}
    assert "finite" in errors["hardware.gpu_memory_gib"] and "finite" in errors["training.learning_rate"]
    assert "integer" in errors["hardware.num_processes"] and "integer" in errors["training.micro_batch_size"]
    assert "integer" in errors["deepspeed.zero_stage"] and "out of range" in errors["training.seed"]
    stage3 = tmp_path / "z.toml"
    stage3.write_text('[hardware]\nplatform = "cpu"\n[deepspeed]\nenabled = true\nzero_stage = 3.0\n')
    assert tuner("compile", stage3, "--out", tmp_path / "b")[0] == EXIT_INVALID
    inline = tmp_path / "i.toml"
    inline.write_text('[hardware]\nplatform = "cpu"\n[deepspeed]\nconfig = {gradient_clipping = nan}\n')
    code, out, err = tuner("compile", inline, "--out", tmp_path / "b")
    assert code == EXIT_INVALID and "deepspeed.config.gradient_clipping" in err
    (tmp_path / "nan.json").write_text('{"gradient_clipping": NaN}')
    inline.write_text('[hardware]\nplatform = "cpu"\n[deepspeed]\nconfig = "nan.json"\n')
    code, out, err = tuner("compile", inline, "--out", tmp_path / "b")
    assert code == EXIT_INVALID and "NaN is not a JSON number" in err


def test_dynamo_backend_and_base_keys_accelerate_refuses(tmp_path):
    (tmp_path / "base.yaml").write_text("compute_environment: LOCAL_MACHINE\nnot_an_accelerate_key: 1\n")
    s = tmp_path / "s.toml"
    s.write_text('[hardware]\nplatform = "cpu"\n[accelerate]\nbase = "base.yaml"\ndynamo_backend = "warp"\n')
    code, out, err = tuner("compile", s, "--out", tmp_path / "b")
    assert code == EXIT_INVALID and "not_an_accelerate_key" in err and '"warp"' in err


def test_accelerate_key_list_matches_accelerate():
    import dataclasses

    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.utils import DynamoBackend
    from tuner.compiler.artefacts import emit
    from tuner.compiler.keys.schema import index

    assert emit.ACCELERATE_CONFIG_KEYS == {f.name for f in dataclasses.fields(ClusterConfig)} | {"fp16", "dynamo_backend"}
    assert set(index().keys["accelerate.dynamo_backend"].enum) == {b.value.lower() for b in DynamoBackend}


# --- caches and facts ----------------------------------------------------------------------

def test_corrupt_hardware_facts_and_detection_cache_warn_once_and_compile(tmp_path):
    """A real `tuner compile` process (pytest would capture the warnings in-process)."""
    import subprocess
    import sys

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "fsdp_block_cache.json").write_text('{"entries": ')
    (cache / "hardware_facts.json").write_text('{"gpus": "many"}')
    (tmp_path / "facts.json").write_text('{"gpus": [1]}')

    def compile_with(facts: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "TUNER_CACHE_DIR": str(cache), "TUNER_HARDWARE_FACTS": facts}
        return subprocess.run([sys.executable, "-m", "tuner", "compile", str(EXAMPLES / "fsdp2.toml"), "--out",
                               str(tmp_path / "b")], capture_output=True, text=True, env=env, timeout=120)

    p = compile_with(str(tmp_path / "facts.json"))
    assert p.returncode == EXIT_OK, p.stderr
    assert p.stderr.count("block-detection cache is corrupt") == 1, p.stderr
    assert p.stderr.count("TUNER_HARDWARE_FACTS file") == 1, p.stderr
    p = compile_with("/dev/zero")
    assert p.returncode == EXIT_OK and p.stderr.count("not a regular file") == 1, p.stderr
    assert "Traceback" not in p.stderr


def test_cache_clear_with_a_file_as_cache_dir(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("x")
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "f"))
    code, out, err = tuner("cache", "clear")
    assert code == EXIT_USAGE and "not a directory" in err
    assert (tmp_path / "f").read_text() == "x"


# --- tuner import ------------------------------------------------------------------------------

def test_import_nulls_non_utf8_integer_keys_and_a_directory(tmp_path):
    # a SimpleTuner flat config (`--` flags) with JSON nulls: TOML has no null, they are unset
    (tmp_path / "n.json").write_text('{"--fsdp_version": null, "--num_processes": 2, "--deepspeed": null, '
                                     '"--model_family": "sdxl"}')  # a family: its model is derived (issue 34)
    code, out, err = tuner("import", tmp_path / "n.json", "-o", tmp_path / "n.toml")
    assert code == EXIT_OK, err
    assert "num_processes = 2" in (tmp_path / "n.toml").read_text()
    (tmp_path / "bad.json").write_bytes(b'{"a": "\xff"}')
    code, out, err = tuner("import", tmp_path / "bad.json", "-o", tmp_path / "b.toml")
    assert code == EXIT_USAGE and "not UTF-8" in err
    (tmp_path / "k.yaml").write_text("compute_environment: LOCAL_MACHINE\n1: 2\n")
    code, out, err = tuner("import", tmp_path / "k.yaml", "-o", tmp_path / "k.toml")
    assert code == EXIT_USAGE and "is not a string" in err
    target = tmp_path / "dir"
    target.mkdir()
    code, out, err = tuner("import", tmp_path / "n.json", "-o", target, "--force")
    assert code == EXIT_USAGE and "is a directory" in err
    assert list(target.iterdir()) == [] and not list(tmp_path.glob(".*.tmp"))


# --- tuner run on a damaged build -----------------------------------------------------------

@pytest.mark.parametrize("edit", ["truncate", "settings", "plan", "nan"])
def test_run_refuses_a_corrupt_or_hand_edited_manifest(tmp_path, edit):
    build = tmp_path / "build"
    assert tuner("compile", EXAMPLES / "ddp.toml", "--out", build)[0] == EXIT_OK
    mf = build / "manifest.json"
    data = json.loads(mf.read_text())
    if edit == "truncate":
        mf.write_text(mf.read_text()[:100])
    else:
        if edit == "settings":
            data["settings"]["hardware"]["num_processes"] = "two"
        elif edit == "plan":
            data["plan"]["world_size"] = -1
        mf.write_text(json.dumps(data).replace('"seed": 42', '"seed": NaN') if edit == "nan" else json.dumps(data))
    code, out, err = tuner("run", build)
    assert code == EXIT_USAGE and "recompile" in err, err


def test_blocks_with_a_string_hidden_size(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": "64", "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}))
    code, out, err = tuner("blocks", tmp_path)
    assert code == EXIT_USAGE and "hidden_size" in err, err


def test_a_config_json_with_absurd_dimensions_is_not_counted(tmp_path):
    """Found by the property test: a hidden_size of 2**63 overflowed the report's float
    arithmetic. A config saying more than a quadrillion parameters is not counted (the
    estimate then asks for `tuner blocks`), and nothing raises."""
    from tuner.compiler.memory.shapes import MAX_PARAMETERS, analytic_count

    absurd = {"model_type": "bert", "hidden_size": 2**63, "num_hidden_layers": 0, "vocab_size": 1e297}
    assert analytic_count(absurd) is None
    fine = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100}
    assert 0 < sum(analytic_count(fine).sizes) <= MAX_PARAMETERS
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({**absurd, "vocab_size": int(1e297)}))
    (tmp_path / "s.toml").write_text(f'[model]\npath = "{model}"\n[hardware]\nplatform = "cpu"\n')
    code, out, err = tuner("estimate", tmp_path / "s.toml")
    assert code in (EXIT_OK, EXIT_INVALID) and "Traceback" not in err and "internal error" not in err, err
