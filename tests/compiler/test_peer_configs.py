"""Real configs from other projects (../shared/peer-configs): import them, merge into them.

For every accelerate YAML that accelerate's own loader accepts, and every DeepSpeed JSON
that parses: either `tuner import` turns it into settings that compile to equivalent
artefacts, or it is used as `accelerate.base` and every one of its keys survives.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.compiler.helpers import accelerate_filled, load_accelerate, parse_deepspeed
from tests.conftest import PEER_CONFIGS
from tuner.compiler import compile_text
from tuner.compiler.emit import DECIDED_KEYS, DS_KEYS_FORBIDDEN_WITH_FILE
from tuner.compiler.importer import ImportError_, import_files, to_toml

if not PEER_CONFIGS.is_dir():  # pragma: no cover - shared/ is beside every checkout here
    pytest.skip("../shared/peer-configs is not present", allow_module_level=True)

YAMLS = sorted(p for p in PEER_CONFIGS.rglob("*.y*ml") if "axolotl" not in p.parts)
JSONS = sorted(PEER_CONFIGS.rglob("*.json"))
#: accelerate precisions or launch types tuner has no strategy for: imported, but not equivalent.
NOT_MODELLED = {"fp8", "MULTI_XPU", "MEGATRON_LM"}


def _ids(paths):
    return [str(p.relative_to(PEER_CONFIGS)) for p in paths]


def _accepted_by_accelerate(path: Path):
    try:
        return load_accelerate(path)
    except Exception:
        return None


@pytest.fixture(autouse=True)
def _gpu_target(monkeypatch):
    """These are GPU configs: compile them for a CUDA machine, as their owners do."""
    monkeypatch.setenv("TUNER_PLATFORM", "cuda")


@pytest.mark.parametrize("path", YAMLS, ids=_ids(YAMLS))
def test_accelerate_yaml_is_importable_or_mergeable(path, tmp_path):
    original = _accepted_by_accelerate(path)
    if original is None:
        # accelerate refuses it (unknown keys, upstream validation fixtures): tuner must not crash on it
        imported = import_files([path])
        assert to_toml(imported)
        return
    raw = yaml.safe_load(path.read_text())
    settings = tmp_path / "settings.toml"

    # 1. as a base: every key that tuner does not decide survives with its value
    settings.write_text(f"base = '{path}'\nplatform = 'cuda'\nnum_processes = 2\n")
    strategy_blocks = {"megatron_lm_config"}  # replaced by the strategy tuner compiles
    merged = compile_text(settings.read_text(), path=settings)
    if raw.get("compute_environment", "LOCAL_MACHINE") != "LOCAL_MACHINE":
        (err,) = merged.diagnostics.errors  # not a local launch config: refused, import offered
        assert err.key == "accelerate.base" and "tuner import" in err.fix
    else:
        assert merged.ok, [d.format() for d in merged.diagnostics.errors]
        out = yaml.safe_load(merged.accelerate_yaml)
        for key, value in raw.items():
            if key in DECIDED_KEYS or key in strategy_blocks:
                continue
            assert out[key] == value, key
        merged.write()
        load_accelerate(tmp_path / "build" / "accelerate.yaml")

    # 2. imported: compiles to an equivalent accelerate config
    text = to_toml(import_files([path]))
    if any(str(v) in NOT_MODELLED for v in (raw.get("mixed_precision"), raw.get("distributed_type"))):
        return
    settings.write_text(text)
    result = compile_text(text, path=settings)
    assert result.ok, text + "\n".join(d.format() for d in result.diagnostics.errors)
    result.write()
    ours = load_accelerate(tmp_path / "build" / "accelerate.yaml")
    # YAML 1.1 reads a bare `distributed_type: NO` as false, and accelerate keeps it so.
    their_type = getattr(original.distributed_type, "value", "NO")
    if their_type in ("NO", "MULTI_GPU", "MULTI_CPU", "FSDP", "DEEPSPEED"):
        expected = their_type
        if expected == "MULTI_GPU" and original.num_processes in (1, -1) and original.num_machines == 1:
            expected = "NO"  # one process is not a multi-GPU run
        if expected == "MULTI_GPU" and result.plan.platform == "cpu":
            expected = "MULTI_CPU"
        assert ours.distributed_type.value == expected
    for attr in ("num_machines", "machine_rank", "main_process_ip", "main_process_port", "rdzv_backend"):
        if raw.get(attr) is not None and hasattr(original, attr):
            assert getattr(ours, attr) == getattr(original, attr), attr
    if getattr(original, "num_processes", None) and original.num_processes > 0:
        assert ours.num_processes == original.num_processes
    if their_type != "DEEPSPEED":
        assert (ours.mixed_precision or "no") == (original.mixed_precision or "no")
    if their_type == "FSDP":
        theirs = original.fsdp_config
        assert ours.fsdp_config["fsdp_version"] == theirs.get("fsdp_version", 1)
        for key in ("fsdp_auto_wrap_policy", "fsdp_state_dict_type", "fsdp_offload_params",
                    "fsdp_cpu_ram_efficient_loading", "fsdp_transformer_layer_cls_to_wrap", "fsdp_activation_checkpointing"):
            if key in theirs:
                assert str(ours.fsdp_config.get(key)).replace(" ", "") == str(theirs[key]).replace(" ", ""), key


def _parses(path: Path):
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def _without_auto(node):
    if isinstance(node, dict):
        return {k: _without_auto(v) for k, v in node.items() if v != "auto"}
    return node


def _deepspeed_accepts(data: dict) -> bool:
    """Does DeepSpeed's own parser accept this config once its "auto" placeholders (which
    only a trainer fills) are left out? Batch sizes default to one sample per rank."""
    config = _without_auto(data)
    if not any(k in config for k in ("train_batch_size", "train_micro_batch_size_per_gpu")):
        config["train_micro_batch_size_per_gpu"] = 1
    try:
        parse_deepspeed(config, 1)
    except Exception:
        return False
    return True


@pytest.mark.parametrize("path", JSONS, ids=_ids(JSONS))
def test_deepspeed_json_imports_and_compiles_to_what_deepspeed_accepts(path, tmp_path):
    data = _parses(path)
    if data is None:
        with pytest.raises(ImportError_, match="does not parse"):
            import_files([path])
        return
    if not _deepspeed_accepts(data):
        pytest.skip("DeepSpeed's own parser refuses this config; out of scope")
    text = to_toml(import_files([path]))
    settings = tmp_path / "settings.toml"
    settings.write_text(text)
    result = compile_text(text + "\n[hardware]\nplatform = 'cuda'\n" if "[hardware]" not in text
                          else text.replace("[hardware]", "[hardware]\nplatform = 'cuda'"), path=settings)
    assert result.ok, text + "\n".join(d.format() for d in result.diagnostics.errors)
    ours = json.loads(result.deepspeed_json)
    # "auto" values are filled as accelerate fills them at prepare time, then DeepSpeed judges.
    world = result.plan.data_parallel_size
    parse_deepspeed(accelerate_filled(ours, result.settings.to_dict(), world), world)
    # Their concrete choices survive (tuner only fills "auto" and normalises optimizer names).
    for key in ("zero_optimization", "fp16", "bf16"):
        for sub, value in (data.get(key) or {}).items():
            if value != "auto" and not (key == "zero_optimization" and sub == "offload_param"
                                        and data[key].get("stage") != 3):
                _assert_kept(value, ours[key][sub], f"{key}.{sub}")
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        if isinstance(data.get(key), int):
            assert ours[key] == data[key], key


def _assert_kept(theirs, ours, where: str) -> None:
    """Their concrete value is in ours: equal, or for tables a subset (tuner may add keys)."""
    if isinstance(theirs, dict):
        for key, value in theirs.items():
            if value != "auto":
                _assert_kept(value, ours[key], f"{where}.{key}")
    elif isinstance(theirs, float) and theirs.is_integer() and isinstance(ours, int):
        assert ours == int(theirs), where
    else:
        assert ours == theirs, where


def test_forbidden_keys_never_sit_beside_a_deepspeed_file(tmp_path):
    path = PEER_CONFIGS / "accelerate/config_yaml_templates/deepspeed.yaml"
    result = compile_text(f"base = '{path}'\n[deepspeed]\nenabled = true\ngradient_clipping = 0.5\n", path=tmp_path / "s.toml")
    cfg = yaml.safe_load(result.accelerate_yaml)
    assert not set(cfg["deepspeed_config"]) & set(DS_KEYS_FORBIDDEN_WITH_FILE)
    assert "mixed_precision" not in cfg
