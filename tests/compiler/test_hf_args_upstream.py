"""HF Trainer / ms-swift argument files are read by transformers' own
`HfArgumentParser(TrainingArguments)` (issue 23 item 7), not by tuner's table: a value means
what the Trainer makes of it, a value the parser refuses is refused naming the key, a key
TrainingArguments lacks is listed as not imported, and ms-swift's `torch_dtype` sets the
precision as ms-swift does. `tuner import` runs the parser in a subprocess (~10 s here); the
first test goes through it, the others call the same parser in this process (conftest.py)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
from transformers import HfArgumentParser, TrainingArguments
from tuner.compiler.compile import compile_text
from tuner.compiler.diagnostics import EXIT_INVALID
from tuner.compiler.formats.importer import ImportRefused, import_files, to_toml


@pytest.fixture(autouse=True)
def _cpu_host(monkeypatch):
    monkeypatch.setenv("TUNER_PLATFORM", "cpu")


def _write(tmp_path: Path, data: dict, name: str = "args.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _settings(paths: list[Path], tmp_path: Path):
    imported = import_files(paths)
    text = to_toml(imported)
    result = compile_text(text, path=tmp_path / "settings.toml")
    assert result.ok, text + "\n".join(d.format() for d in result.diagnostics.errors)
    return imported, result.settings


@pytest.mark.hf_parser_subprocess  # the one test here through its subprocess
def test_values_spelled_for_the_trainers_parser_mean_what_the_trainer_reads(tmp_path):
    args = {"per_device_train_batch_size": "2", "gradient_accumulation_steps": "4", "bf16": "true",
            "lr_scheduler_type": "cosine", "output_dir": "out"}
    # the Trainer's own reading of the same file (its argparse path, as `HfArgumentParser` runs it)
    trainer = HfArgumentParser(TrainingArguments).parse_args([f"--{k}={v}" for k, v in args.items()])
    assert trainer.bf16 is True and trainer.gradient_accumulation_steps == 4
    _, settings = _settings([_write(tmp_path, args)], tmp_path)
    assert settings.training.mixed_precision == "bf16"
    assert settings.training.gradient_accumulation_steps == trainer.gradient_accumulation_steps
    assert settings.training.micro_batch_size == trainer.per_device_train_batch_size == 2


def test_a_key_trainingarguments_lacks_is_listed_as_not_imported(tmp_path):
    args = {"per_device_train_batch_size": 2, "lr_scheduler_type": "linear", "per_device_batch_size": 8}
    imported, settings = _settings([_write(tmp_path, args)], tmp_path)
    assert imported.not_distributed["args.json"] == {"per_device_batch_size": 8}
    assert any("per_device_batch_size" in r and "not TrainingArguments fields" in r for r in imported.remarks)
    assert settings.training.micro_batch_size == 2


@pytest.mark.parametrize("warmup", [{"warmup_ratio": 0.05}, {"warmup_steps": 0.05}])
def test_a_warmup_ratio_written_for_either_transformers_reaches_the_schedule(tmp_path, warmup):
    """transformers 4 wrote `warmup_ratio`; transformers 5 dropped it and reads a `warmup_steps`
    below 1 as the ratio. Either file warms up for 5 % of the steps, nothing is lost."""
    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    if "warmup_steps" in warmup and "warmup_ratio" in fields:
        pytest.skip("this transformers reads warmup_steps as a whole number of steps")
    args = {"per_device_train_batch_size": 2, "lr_scheduler_type": "linear", **warmup}
    imported, settings = _settings([_write(tmp_path, args)], tmp_path)
    assert (settings.training.warmup_ratio, settings.training.warmup_steps) == (0.05, 0)
    assert "args.json" not in imported.not_distributed
    if "warmup_ratio" in warmup and "warmup_ratio" not in fields:
        assert any("warmup_ratio" in r and "transformers 4" in r for r in imported.remarks), imported.remarks
    steps = _settings([_write(tmp_path, {**args, "warmup_steps": 30, "warmup_ratio": 0})], tmp_path)[1].training
    assert steps.warmup_steps == 30 and isinstance(steps.warmup_steps, int)


@pytest.mark.parametrize(("key", "value", "verdict"), [
    ("gradient_accumulation_steps", "4.5", "invalid int value"),
    ("lr_scheduler_type", "COSINE", "invalid choice"),
])
def test_a_value_the_parser_refuses_is_refused_naming_the_key(tmp_path, key, value, verdict):
    args = {"per_device_train_batch_size": 2, "lr_scheduler_type": "linear", "bf16": True, key: value}
    with pytest.raises(ImportRefused) as caught:
        import_files([_write(tmp_path, args)])
    message = str(caught.value)
    assert f"--{key}" in message and verdict in message and "args.json" in message
    assert caught.value.exit_code == EXIT_INVALID


def test_ms_swift_torch_dtype_sets_the_precision_ms_swift_sets(tmp_path):
    swift = {"model": "Qwen/Qwen2.5-0.5B", "train_type": "full", "template": "qwen2_5",
             "per_device_train_batch_size": 1, "lr_scheduler_type": "cosine", "torch_dtype": "bfloat16"}
    imported, settings = _settings([_write(tmp_path, swift)], tmp_path)
    assert "ms-swift" in imported.formats
    assert settings.training.mixed_precision == "bf16"
    # an explicit bf16/fp16 wins, as in ms-swift's ModelArguments._init_mixed_precision
    explicit = _write(tmp_path, {**swift, "bf16": False, "fp16": True}, "explicit.json")
    _, settings = _settings([explicit], tmp_path)
    assert settings.training.mixed_precision == "fp16"


def test_without_transformers_the_import_still_works_and_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # what Python sees when it is not installed
    args = {"per_device_train_batch_size": 2, "lr_scheduler_type": "cosine", "bf16": True}
    imported, settings = _settings([_write(tmp_path, args)], tmp_path)
    assert settings.training.mixed_precision == "bf16" and settings.training.micro_batch_size == 2
    assert any("transformers is not installed" in r and "pip install 'tuner-train[runtime]'" in r
               for r in imported.remarks)
