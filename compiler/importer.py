"""`tuner import`: existing accelerate YAML, DeepSpeed JSON or flat configs -> settings.

Each reader turns one foreign file into canonical settings values (``{"fsdp.version": 2}``)
plus remarks. Keys tuner does not model are never dropped silently: for an accelerate YAML
the source file becomes ``accelerate.base`` so they survive the next compile; for a flat
config they are listed as comments in the written file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .schema import index

# accelerate YAML top-level keys tuner models, and where they go.
_ACCEL_TOP = {
    "num_processes": "hardware.num_processes",
    "num_machines": "hardware.num_machines",
    "machine_rank": "hardware.machine_rank",
    "main_process_ip": "hardware.main_process_ip",
    "main_process_port": "hardware.main_process_port",
    "rdzv_backend": "hardware.rdzv_backend",
    "same_network": "hardware.same_network",
    "mixed_precision": "training.mixed_precision",
}
_FSDP_KEYS = {
    "fsdp_version": "fsdp.version",
    "fsdp_auto_wrap_policy": "fsdp.auto_wrap_policy",
    "fsdp_transformer_layer_cls_to_wrap": "fsdp.transformer_layer_cls_to_wrap",
    "fsdp_state_dict_type": "checkpoint.state_dict_type",
    "fsdp_cpu_ram_efficient_loading": "fsdp.cpu_ram_efficient_loading",
    "fsdp_offload_params": "fsdp.offload_params",
    "fsdp_activation_checkpointing": "fsdp.activation_checkpointing",
    "fsdp_min_num_params": "fsdp.min_num_params",
    "fsdp_sharding_strategy": "fsdp.sharding_strategy",
}
_DS_YAML_KEYS = {
    "zero_stage": "deepspeed.zero_stage",
    "offload_optimizer_device": "deepspeed.offload_optimizer",
    "offload_param_device": "deepspeed.offload_param",
    "offload_param_nvme_path": "deepspeed.nvme_path",
    "offload_optimizer_nvme_path": "deepspeed.nvme_path",
    "gradient_accumulation_steps": "training.gradient_accumulation_steps",
    "gradient_clipping": "deepspeed.gradient_clipping",
    "zero3_init_flag": "deepspeed.zero3_init",
    "zero3_save_16bit_model": "deepspeed.gather_16bit_weights_on_model_save",
}
# Keys accelerate writes that carry no decision (or that tuner always writes itself).
_ACCEL_IGNORED = {
    "compute_environment", "debug", "distributed_type", "downcast_bf16", "main_training_function",
    "tpu_env", "tpu_use_cluster", "tpu_use_sudo", "use_cpu", "enable_cpu_affinity", "gpu_ids",
    "fsdp_config", "deepspeed_config", "parallelism_config", "dynamo_config",
}
_FSDP_IGNORED = {"fsdp_sync_module_states", "fsdp_use_orig_params", "fsdp_backward_prefetch",
                 "fsdp_forward_prefetch", "fsdp_reshard_after_forward"}
_DS_MARKERS = {"zero_optimization", "train_batch_size", "train_micro_batch_size_per_gpu", "optimizer",
               "scheduler", "fp16", "bf16", "gradient_accumulation_steps", "zero_allow_untested_optimizer"}


class ImportError_(Exception):
    """A source cannot be read or recognised."""


@dataclass
class Imported:
    values: dict[str, Any] = field(default_factory=dict)
    remarks: list[str] = field(default_factory=list)
    unmodelled: dict[str, Any] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)

    def set(self, path: str, value: Any, source: str) -> None:
        if path in self.values and self.values[path] != value:
            self.remarks.append(f"{path}: {self.values[path]!r} replaced by {value!r} from {source}")
        self.values[path] = value


def _load(path: Path) -> Any:
    """Read one source through the safe reader (a regular, size-capped, UTF-8 file; JSON
    without NaN; bounded nesting) and make it TOML-shaped: every key a string, JSON nulls
    and YAML ``~`` dropped (TOML has no null: an unset value)."""
    from . import files

    try:
        text = files.read_text(path, "import source")
        if path.suffix in (".yaml", ".yml"):
            data = files.parse_yaml(text, str(path))
        elif path.suffix == ".toml":
            import tomllib

            try:
                data = tomllib.loads(text)
            except RecursionError:
                raise files.FileError(f"{path}: nested more than {files.MAX_DEPTH} levels deep") from None
            files.check_depth(data, str(path))
        else:
            data = files.parse_json(text, str(path))
    except files.FileError as exc:
        raise ImportError_(f"{path} does not parse: {exc.message}" if exc.content else exc.message) from None
    except ValueError as exc:  # tomllib.TOMLDecodeError
        raise ImportError_(f"{path} does not parse: {exc}") from None
    return _toml_shaped(data, path)


def _toml_shaped(value: Any, path: Path, where: str = "") -> Any:
    """Nulls dropped; a key that is not a string (YAML reads ``1:``, ``on:`` or ``null:`` as
    a number, a boolean or None) is refused, naming where it is."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                place = f" in {where}" if where else " at top level"
                raise ImportError_(f"{path}: key {key!r}{place} is not a string; quote it (\"{key}\": ...)")
            if item is not None:
                out[key] = _toml_shaped(item, path, f"{where}.{key}" if where else key)
        return out
    if isinstance(value, list):
        return [_toml_shaped(item, path, where) for item in value if item is not None]
    return value


def import_files(paths: list[Path]) -> Imported:
    out = Imported()
    for path in paths:
        data = _load(path)
        if not isinstance(data, dict):
            raise ImportError_(f"{path}: expected a mapping at top level")
        out.sources.append(str(path))
        if path.suffix in (".yaml", ".yml") and ("distributed_type" in data or "compute_environment" in data):
            _from_accelerate(data, path, out)
        elif _DS_MARKERS & set(data):
            _from_deepspeed(data, path, out)
        else:
            _from_flat(data, path, out)
    return out


def _from_accelerate(data: dict[str, Any], path: Path, out: Imported) -> None:
    src = path.name
    dtype = str(data.get("distributed_type", "NO"))
    if dtype in ("False", "NO"):
        dtype = "NO"  # YAML 1.1 reads a bare NO as false
    if dtype == "FSDP":
        out.set("fsdp.enabled", True, src)
    elif dtype == "DEEPSPEED":
        out.set("deepspeed.enabled", True, src)
    elif dtype not in ("NO", "MULTI_GPU", "MULTI_CPU"):
        out.remarks.append(f"{src}: distributed_type {dtype} has no tuner strategy; kept through accelerate.base")
    if data.get("use_cpu") is True or dtype == "MULTI_CPU":
        out.set("hardware.platform", "cpu", src)
    for key, target in _ACCEL_TOP.items():
        if data.get(key) is not None:
            value = data[key]
            if key == "num_processes" and value == -1:
                continue
            out.set(target, value, src)
    fsdp = data.get("fsdp_config") or {}
    if dtype == "FSDP" and isinstance(fsdp, dict):
        for key, value in fsdp.items():
            if key in _FSDP_KEYS:
                out.set(_FSDP_KEYS[key], value, src)
            elif key == "fsdp_reshard_after_forward":
                if isinstance(value, bool):
                    out.set("fsdp.reshard_after_forward", value, src)
                else:  # FSDP v1 spells it as a sharding strategy
                    out.set("fsdp.sharding_strategy", str(value).lower(), src)
                    out.set("fsdp.reshard_after_forward", str(value).upper() in ("FULL_SHARD", "HYBRID_SHARD"), src)
            elif key not in _FSDP_IGNORED:
                out.unmodelled[f"fsdp_config.{key}"] = value
        if "fsdp_version" not in fsdp:
            # accelerate's own default when the YAML does not say: FSDP v1.
            out.set("fsdp.version", 1, src)
            out.remarks.append(f"{src}: no fsdp_version, so accelerate would use FSDP v1; imported as version 1")
    ds = data.get("deepspeed_config") or {}
    if dtype == "DEEPSPEED" and isinstance(ds, dict):
        for key, value in ds.items():
            if key in _DS_YAML_KEYS:
                out.set(_DS_YAML_KEYS[key], value, src)
            elif key == "deepspeed_config_file":
                found = _find_relative(Path(str(value)), path)
                if found is None:
                    out.remarks.append(f"{src}: deepspeed_config_file {value} not found next to {path.parent}; "
                                       "pass it as another source: tuner import YAML JSON")
                else:
                    _from_deepspeed(_load(found), found, out)
            elif key == "deepspeed_multinode_launcher":
                continue
            else:
                out.unmodelled[f"deepspeed_config.{key}"] = value
    pc = data.get("parallelism_config") or {}
    if isinstance(pc, dict) and pc:
        cp = pc.get("parallelism_config_cp_size", 1)
        if cp and cp > 1:
            out.set("context_parallel.size", cp, src)
            out.set("hardware.platform", "cuda", src)
        if pc.get("parallelism_config_cp_comm_strategy"):
            out.set("context_parallel.comm_strategy", pc["parallelism_config_cp_comm_strategy"], src)
        for key in ("parallelism_config_tp_size", "parallelism_config_dp_replicate_size"):
            if pc.get(key, 1) != 1:
                out.unmodelled[f"parallelism_config.{key}"] = pc[key]
    dyn = data.get("dynamo_config") or {}
    if isinstance(dyn, dict) and dyn.get("dynamo_backend") not in (None, "NO", "no"):
        out.set("accelerate.dynamo_backend", str(dyn["dynamo_backend"]).lower(), src)
    for key, value in data.items():
        if key not in _ACCEL_TOP and key not in _ACCEL_IGNORED and value not in (None, [], {}):
            out.unmodelled[key] = value
    local = str(data.get("compute_environment", "LOCAL_MACHINE")) == "LOCAL_MACHINE"
    if out.unmodelled and not local:
        out.remarks.append(f"{src}: a {data['compute_environment']} config; its keys "
                           f"({', '.join(sorted(out.unmodelled))}) have no local-machine meaning and are listed below")
    elif out.unmodelled:
        out.set("accelerate.base", str(path.resolve()), src)
        out.remarks.append(f"{src}: keys tuner does not model ({', '.join(sorted(out.unmodelled))}) survive "
                           "through accelerate.base")


def _find_relative(candidate: Path, yaml_path: Path) -> Path | None:
    if candidate.is_absolute():
        return candidate if candidate.is_file() else None
    for base in [yaml_path.parent, *yaml_path.parent.parents][:4]:
        if (base / candidate).is_file():
            return (base / candidate).resolve()
    return None


def _from_deepspeed(data: dict[str, Any], path: Path, out: Imported) -> None:
    out.set("deepspeed.enabled", True, path.name)
    out.set("deepspeed.config", data, path.name)
    micro, accum, total = (data.get(k) for k in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                                                  "train_batch_size"))
    if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (micro, accum, total)):
        if total % (micro * accum) == 0 and "hardware.num_processes" not in out.values:
            out.set("hardware.num_processes", total // (micro * accum), path.name)
            out.remarks.append(f"{path.name}: num_processes {total // (micro * accum)} inferred from "
                               f"train_batch_size {total} / (micro {micro} x accumulation {accum})")


def _from_flat(data: dict[str, Any], path: Path, out: Imported) -> None:
    idx = index()
    for raw_key, value in data.items():
        key = raw_key.lstrip("-").strip()
        if key in idx.aliases:
            out.set(idx.aliases[key], value, path.name)
        elif key in idx.keys:
            out.set(key, value, path.name)
        elif key in idx.sections and isinstance(value, dict):
            for sub, subvalue in value.items():
                if f"{key}.{sub}" in idx.keys:
                    out.set(f"{key}.{sub}", subvalue, path.name)
                else:
                    out.unmodelled[f"{key}.{sub}"] = subvalue
        else:
            out.unmodelled[key] = value
    if out.unmodelled:
        out.remarks.append(f"{path.name}: {len(out.unmodelled)} key(s) tuner does not use are listed as comments")


def to_toml(imp: Imported) -> str:
    """The imported values as a canonical, sectioned settings.toml (tomlkit)."""
    import tomlkit

    idx = index()
    values = _canonical_spellings(imp.values)
    doc = tomlkit.document()
    doc.add(tomlkit.comment(f"Imported by `tuner import` from {', '.join(imp.sources)}."))
    for remark in imp.remarks:
        doc.add(tomlkit.comment(remark))
    for section in idx.sections:
        keys = [p for p in imp.values if p.startswith(section + ".")]
        if not keys:
            continue
        table = tomlkit.table()
        for path in sorted(keys, key=list(idx.keys).index):
            table.add(path.split(".", 1)[1], _tomlable(values[path]))
        doc.add(section, table)
    if imp.unmodelled and not any(p == "accelerate.base" for p in imp.values):
        doc.add(tomlkit.nl())
        doc.add(tomlkit.comment("Not used by tuner (kept here for reference):"))
        for key, value in sorted(imp.unmodelled.items()):
            doc.add(tomlkit.comment(f"  {key} = {json.dumps(value, default=str)}"))
    return tomlkit.dumps(doc)


def _canonical_spellings(values: dict[str, Any]) -> dict[str, Any]:
    """Foreign spellings (FULL_STATE_DICT, TRANSFORMER_BASED_WRAP) -> tuner's own, via the
    compiler's normaliser; values it cannot normalise are kept as written so that the
    compile of the imported file reports them."""
    from .diagnostics import Diagnostics
    from .normalise import normalise

    nested: dict[str, dict[str, Any]] = {}
    for path, value in values.items():
        section, name = path.split(".", 1)
        nested.setdefault(section, {})[name] = value
    n = normalise(nested, Diagnostics())
    out = {}
    for path, value in values.items():
        section, name = path.split(".", 1)
        out[path] = value if path in n.invalid or path == "deepspeed.config" else n.settings[section][name]
    return out


def _tomlable(value: Any) -> Any:
    """TOML has no null: drop None entries from nested tables."""
    if isinstance(value, dict):
        return {k: _tomlable(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_tomlable(v) for v in value if v is not None]
    return value
