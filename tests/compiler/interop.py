"""What accelerate and DeepSpeed make of a config, derived with their own code.

`launch_view` runs `accelerate launch --config_file YAML train.py`'s own steps without
starting a process (interop-method.md): `launch_command_parser`, `_validate_launch_command`,
the env preparation of the launcher it picks, then the plugin accelerate would build in
that environment (FullyShardedDataParallelPlugin / DeepSpeedPlugin / ParallelismConfig).
CUDA devices are pretended for that step only, so a GPU config takes its GPU branch here.
`deepspeed_effective` is DeepSpeed's DeepSpeedConfig at the run's world size after the
"auto" values are filled the way accelerate fills them in `prepare` (`script_filled`, with
`tuner compile --verify`'s own filling code).
"""

from __future__ import annotations

import copy
import enum
import json
from pathlib import Path
from typing import Any

from tuner.runtime.verify import _environ, fill_auto_as_accelerate, ports_free, pretend_cuda

from tests.compiler.helpers import parse_deepspeed

#: Pretended GPUs per machine while accelerate derives the launch.
FAKE_GPUS = 8
#: What the training script gives accelerate in `prepare` (fills DeepSpeed's "auto"s).
SCRIPT = {"micro_batch": 2, "hidden_size": 64, "lr": 1e-3, "weight_decay": 0.0, "warmup": 1, "total_steps": 100}
#: Env variables that name paths or describe how the YAML spelled a choice, not the choice.
_NOT_A_CHOICE = {"ACCELERATE_DEEPSPEED_CONFIG_FILE", "ACCELERATE_CONFIG_DS_FIELDS"}


def _plain(value: Any) -> Any:
    """Plugin fields as comparable data (enums by name, callables by name)."""
    if isinstance(value, enum.Enum):
        return value.name
    if callable(value) and hasattr(value, "__name__"):
        return value.__name__
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return type(value).__name__


FSDP_FIELDS = ("fsdp_version", "reshard_after_forward", "sharding_strategy", "auto_wrap_policy", "transformer_cls_names_to_wrap",
               "cpu_offload", "backward_prefetch", "forward_prefetch", "use_orig_params", "sync_module_states",
               "state_dict_type", "cpu_ram_efficient_loading", "activation_checkpointing", "limit_all_gathers")


def launch_view(yaml_path: Path, cli: tuple[str, ...] = ()) -> dict[str, Any]:
    """Launch mode, topology, the env accelerate gives each rank, and the plugin it builds.
    `cli`: launch flags given on the command line (e.g. ``--num_processes 8`` for a config
    that leaves the count to the command line, as accelerate then requires)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env, prepare_simple_launcher_cmd_env

    # A busy port on this machine must not change the derived launch (accelerate checks it).
    with pretend_cuda(FAKE_GPUS), ports_free():
        args = launch_command_parser().parse_args(["--config_file", str(yaml_path), *cli, "train.py"])
        args, defaults, mp_from_config = _validate_launch_command(args)
        if args.use_deepspeed and not args.cpu:
            mode = "deepspeed"
            fields = list(defaults.deepspeed_config.keys()) + (["mixed_precision"] if mp_from_config else [])
            args.deepspeed_fields_from_accelerate_config = ",".join(fields)
            _, env = prepare_deepspeed_cmd_env(args)
        elif (args.use_fsdp or args.multi_gpu) and not args.cpu:
            mode = "fsdp" if args.use_fsdp else "multi_gpu"
            env = prepare_multi_gpu_env(args)
        else:
            mode = "cpu" if args.cpu else "single"
            _, env = prepare_simple_launcher_cmd_env(args)
    procs = args.num_processes if mode != "single" else 1
    if mode == "multi_gpu" and procs * (args.num_machines or 1) == 1:
        mode = "single"  # torchrun with one process is the single-process run
    full_env = dict(env)
    env = {k: v for k, v in env.items() if k.startswith(("ACCELERATE_", "FSDP_", "PARALLELISM_CONFIG_"))
           and k not in _NOT_A_CHOICE}
    view: dict[str, Any] = {
        "mode": mode, "num_processes": procs, "num_machines": args.num_machines, "machine_rank": args.machine_rank,
        "main_process_ip": args.main_process_ip if args.num_machines > 1 else None,
        # the port matters only when processes rendezvous
        "main_process_port": args.main_process_port if procs * (args.num_machines or 1) > 1 else None,
        "gpu_ids": args.gpu_ids,
        "env": env,
    }
    with _environ(full_env), pretend_cuda(FAKE_GPUS):
        if mode == "fsdp":
            from accelerate.utils import FullyShardedDataParallelPlugin

            plugin = FullyShardedDataParallelPlugin()
            view["plugin"] = {f: _plain(getattr(plugin, f, None)) for f in FSDP_FIELDS}
        elif mode == "deepspeed":
            from accelerate.utils import DeepSpeedPlugin

            plugin = DeepSpeedPlugin()  # raises on keys accelerate forbids beside a config file
            view["plugin"] = {"zero3_init_flag": plugin.zero3_init_flag,
                              "zero3_save_16bit_model": plugin.zero3_save_16bit_model}
            view["deepspeed_plugin"] = plugin
        if env.get("ACCELERATE_USE_PARALLELISM_CONFIG") == "true":
            from accelerate.parallelism_config import ParallelismConfig

            pc = ParallelismConfig()
            view["parallelism"] = {k: _plain(getattr(pc, k)) for k in (
                "dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "cp_backend", "sp_size", "sp_backend")}
    return view


def script_filled(plugin, world: int, mixed_precision: str | None = None) -> dict[str, Any]:
    """The DeepSpeed dict accelerate hands to `deepspeed.initialize`, its "auto"s filled the way
    `Accelerator._prepare_deepspeed` fills them for SCRIPT (a copy; the plugin is left alone).
    The filling is `tuner compile --verify`'s own (`fill_auto_as_accelerate`); this only says
    what the test script passes it."""
    plugin = copy.deepcopy(plugin)
    accum = plugin.get_value("gradient_accumulation_steps")
    accum = accum if isinstance(accum, int) else 1
    total = plugin.get_value("train_batch_size")
    # the script's dataloader; sized to a fixed global batch if there is one
    fixed = isinstance(total, int) and total % (accum * world) == 0
    filled = fill_auto_as_accelerate(
        plugin, world, mixed_precision=mixed_precision or "no",  # what Accelerator() does with the env's value
        micro_batch=total // (accum * world) if fixed else SCRIPT["micro_batch"], accumulation=1,
        learning_rate=SCRIPT["lr"], weight_decay=SCRIPT["weight_decay"], warmup_steps=SCRIPT["warmup"],
        total_steps=-(-SCRIPT["total_steps"] // world), hidden_size=SCRIPT["hidden_size"],
        # what the HF Trainer (trl, LLaMA-Factory, axolotl) also fills from TrainingArguments'
        # defaults; accelerate alone refuses these "auto"s, so configs written for the Trainer
        # are judged as the Trainer runs them
        trainer_defaults=True)
    return _fill_remaining_auto(filled)


def _fill_remaining_auto(cfg: Any) -> Any:
    """An "auto" nothing above fills (a key accelerate has no kwarg for) is left out, as
    DeepSpeed would then use its own default; the comparison stays symmetric."""
    if isinstance(cfg, dict):
        return {k: _fill_remaining_auto(v) for k, v in cfg.items() if v != "auto"}
    return cfg


_DS_SKIP = {"_param_dict", "mpu", "global_rank", "world_size", "_initial_param_dict"}


def deepspeed_effective(config: dict[str, Any], world: int) -> dict[str, Any]:
    """DeepSpeedConfig's resolved attributes (its defaults applied) at `world` ranks."""
    parsed = parse_deepspeed(json.loads(json.dumps(config)), world)
    return {k: _plain(v) for k, v in sorted(vars(parsed).items()) if k not in _DS_SKIP}


def import_and_compile(source: Path, tmp_path: Path) -> str:
    """`tuner import` of `source`, then the settings written to tmp_path/settings.toml compiled
    and written to tmp_path/build (asserted ok); returns the imported settings text."""
    from tuner.compiler.compile import compile_text
    from tuner.compiler.formats.importer import import_files, to_toml

    text = to_toml(import_files([source]))
    settings = tmp_path / "settings.toml"
    settings.write_text(text)
    result = compile_text(text, path=settings)
    assert result.ok, text + "\n".join(d.format() for d in result.diagnostics.errors)
    result.write()
    return text
