"""Issue 34 (fidelity round 3) for axolotl, LLaMA-Factory and ms-swift: a public training config,
imported, means what the source tool would train, field by field, its defaults for unset keys
included (tests/compiler/fidelity_expect.py, each value cited from the tool's code).

For every file of the corpus (tests/compiler/data/fidelity3, ../peer2, tests/data/peer-configs'
axolotl FSDP examples): either the import refuses it naming the key that makes it untrainable as
written (REFUSED), or every expected field of the *normalised* settings equals the tool's value or
is named in one of the import's remarks by its source key: 0 silent changes. The normalised
settings (the compiler's normalise stage), not the compile's exit code, so that the LoRA + DeepSpeed
files pass whether or not the compile still refuses that pair. In-process, no ranks.
"""

from __future__ import annotations

import json
import math
import shutil
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml
from tuner.compiler.canonical.normalise import normalise
from tuner.compiler.diagnostics import Diagnostics
from tuner.compiler.formats.importer import ImportRefused, import_files, to_toml

from tests.compiler import fidelity_expect as expect
from tests.conftest import REPO

DATA = REPO / "tests" / "compiler" / "data"
F3 = DATA / "fidelity3"
PEER2 = DATA / "peer2"
SWIFT = F3 / "modelscope__ms-swift"
AXOLOTL = sorted([*(F3 / "axolotl-ai-cloud__axolotl").rglob("*.y*ml"),
                  *(PEER2 / "axolotl-ai-cloud__axolotl" / "examples").rglob("*.y*ml"),
                  *(PEER2 / "modal-labs__llm-finetuning").rglob("*.y*ml"),
                  *(REPO / "tests" / "data" / "peer-configs" / "axolotl" / "fsdp_examples").glob("*.y*ml")])
LLAMAFACTORY = sorted([*(F3 / "hiyouga__LLaMA-Factory").rglob("*.yaml"),
                       *(PEER2 / "hiyouga__LLaMA-Factory" / "examples").rglob("*.yaml")])
SWIFT_FILES = sorted([*(SWIFT / "examples").rglob("*.y*ml"), *(SWIFT / "examples").rglob("*.json"),
                      SWIFT / "tests" / "llm" / "config" / "sft.json"])

#: file name -> the key its refusal names (the file cannot be trained as written by tuner).
REFUSED = {
    "instruct-dpo-lora-8b.yml": "rl", "reward-model.yaml": "reward_model", "lora.yml": "load_in_8bit",
    "bigstral-ds-zero3.yaml": "unfrozen_parameters", "llama3_lora_sft.yaml@loraplus": "loraplus_lr_ratio",
    "llama3_full_sft.yaml@badam": "use_badam", "llama3_full_sft.yaml@galore": "use_galore",
    "llama3_fp8_fsdp_sft.yaml": "fp8", "llama3_freeze_sft.yaml": "use_llama_pro", "qwen3_lora_dpo.yaml": "stage",
    "qwen3_lora_reward.yaml": "stage", "qwen3_lora_kto.yaml": "stage",
    "sft.json@config": "model_id_or_path",  # ms-swift 1.x: a registry model_type, no path
}


def _refusal(path: Path) -> str | None:
    return REFUSED.get(f"{path.name}@{path.parent.name}") or REFUSED.get(path.name)


def _id(path: Path) -> str:
    return str(path.relative_to(REPO / "tests"))


@pytest.fixture(scope="module")
def trainer_defaults():
    return expect.trainer_defaults()


def _stage(path: Path, tmp_path: Path) -> Path:
    """The repository layout a relative `deepspeed:` path resolves in (as the tools run from the root)."""
    for root in (PEER2 / "axolotl-ai-cloud__axolotl", PEER2 / "hiyouga__LLaMA-Factory"):
        if root in path.parents:
            shutil.copytree(root, tmp_path / "repo")
            return tmp_path / "repo" / path.relative_to(root)
    return path


def _normalised(source: Path) -> tuple[dict, list[str], dict]:
    imported = import_files([source])
    nested = tomllib.loads(to_toml(imported))
    n = normalise(nested, Diagnostics())
    flat = {f"{s}.{k}": v for s, keys in n.settings.items() if isinstance(keys, Mapping) for k, v in keys.items()}
    return flat, imported.remarks, imported.not_distributed.get(source.name, {})


def _same(got, want) -> bool:
    if isinstance(want, float) or isinstance(got, float):
        try:
            return math.isclose(float(got), float(want))
        except (TypeError, ValueError):
            return False
    return bool(got == want)


def _silent_changes(settings: dict, remarks: list[str], expected: expect.Expect) -> list[str]:
    """Fields whose value is not the tool's and whose source key no remark names."""
    silent = []
    for path, (want, key) in expected.items():
        if not _same(settings.get(path), want) and not any(key in r for r in remarks):
            silent.append(f"{path}: {settings.get(path)!r}, the tool trains {want!r} ({key} named nowhere)")
    return silent


def _judge(path: Path, tmp_path: Path, build) -> None:
    source = _stage(path, tmp_path)
    key = _refusal(path)
    if key:
        with pytest.raises(ImportRefused) as caught:
            import_files([source])
        assert key in str(caught.value) and path.name in str(caught.value)
        assert caught.value.exit_code == 1
        return
    settings, remarks, _ = _normalised(source)
    expected = build(yaml.safe_load(path.read_text()))
    assert _silent_changes(settings, remarks, expected) == []


@pytest.mark.parametrize("path", AXOLOTL, ids=[_id(p) for p in AXOLOTL])
def test_axolotl_config_trains_what_axolotl_trains(path, tmp_path):
    _judge(path, tmp_path, expect.axolotl)


@pytest.mark.parametrize("path", LLAMAFACTORY, ids=[_id(p) for p in LLAMAFACTORY])
def test_llamafactory_config_trains_what_llamafactory_trains(path, tmp_path, trainer_defaults):
    _judge(path, tmp_path, lambda cfg: expect.llamafactory(cfg, trainer_defaults))


@pytest.mark.parametrize("path", SWIFT_FILES, ids=[_id(p) for p in SWIFT_FILES])
def test_ms_swift_config_trains_what_ms_swift_trains(path, tmp_path, trainer_defaults):
    _judge(path, tmp_path, lambda cfg: expect.swift(cfg, trainer_defaults))


TRAINER_FILES = sorted((DATA / "formats").glob("hf_trainer_*.json"))


@pytest.mark.parametrize("path", TRAINER_FILES, ids=[p.name for p in TRAINER_FILES])
def test_hf_trainer_args_train_what_the_trainer_trains(path, tmp_path, trainer_defaults):
    """TrainingArguments files (constructed, tests/compiler/data/PROVENANCE.md): unset keys are the
    Trainer's defaults (batch 8, 5e-5, linear, 3 epochs, every 500 steps...), not tuner's."""
    _judge(path, tmp_path, lambda cfg: expect.trainer(cfg, trainer_defaults))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"per_device_train_batch_size": 2, "lr_scheduler_type": "cosine"}))
    _judge(bare, tmp_path, lambda cfg: expect.trainer(cfg, trainer_defaults))


def test_corpus_sizes():
    assert (len(AXOLOTL), len(LLAMAFACTORY), len(SWIFT_FILES)) >= (10, 10, 3)
    assert len(AXOLOTL) >= 10 and len(LLAMAFACTORY) >= 10 and len(SWIFT_FILES) >= 3


#: Edits of one shipped axolotl FSDP2 example for what no shipped example exercises (every FSDP2 example
#: sets state_dict_type; none spells fsdp_config.version): name -> (fsdp_config edits (None: removed),
#: top-level fsdp_version, the FSDP version and state dict the HF Trainer builds axolotl's plugin with).
#: Values by axolotl's validation.py:1107-1123 and transformers' training_args.py:2826/:2852 (see
#: fidelity_expect._axolotl_fsdp); the old import gave FSDP2 a sharded state dict here.
FSDP_EDITS = {
    "fsdp2-state-dict-unset": ({"fsdp_state_dict_type": None}, None, 2, "full"),
    "top-level-version": ({"fsdp_version": None, "fsdp_state_dict_type": None}, 2, 2, "full"),
    "config-version-key": ({"fsdp_version": None, "version": 2, "fsdp_state_dict_type": None}, None, 2, "full"),
    "version-beats-fsdp-version": ({"fsdp_version": 1, "version": 2}, None, 2, "full"),
    "no-version-is-v1": ({"fsdp_version": None, "fsdp_state_dict_type": None}, None, 1, "full"),
    "sharded-kept": ({"fsdp_state_dict_type": "SHARDED_STATE_DICT"}, None, 2, "sharded"),
    "top-and-config-disagree": ({"fsdp_version": 1}, 2, 1, "full"),
    "final-save-differs": ({"final_state_dict_type": "SHARDED_STATE_DICT"}, None, 2, "full"),
}


@pytest.mark.parametrize("name", sorted(FSDP_EDITS))
def test_axolotl_fsdp_version_and_state_dict_are_the_trainers(name, tmp_path):
    edits, top, version, state_dict = FSDP_EDITS[name]
    cfg = yaml.safe_load((PEER2 / "axolotl-ai-cloud__axolotl" / "examples" / "qwen2" / "adamw-pretrain-fsdp2.yaml")
                         .read_text())
    for key, value in edits.items():
        cfg["fsdp_config"].pop(key, None) if value is None else cfg["fsdp_config"].__setitem__(key, value)
    if top is not None:
        cfg["fsdp_version"] = top
    source = tmp_path / f"{name}.yaml"
    source.write_text(yaml.safe_dump(cfg))
    settings, remarks, _ = _normalised(source)
    assert (settings["fsdp.version"], settings["checkpoint.state_dict_type"]) == (version, state_dict)
    assert _silent_changes(settings, remarks, expect.axolotl(cfg)) == []
    disagree = [r for r in remarks if "fsdp_version" in r and "disagree" in r]
    assert len(disagree) == (1 if name == "top-and-config-disagree" else 0)
    final = [r for r in remarks if "fsdp_config.final_state_dict_type" in r]  # axolotl's train.py:319-325
    assert len(final) == (1 if name == "final-save-differs" else 0)
