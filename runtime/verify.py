"""The packages' own verdict on a build: accelerate's loader and launcher, DeepSpeed's parser.

`tuner compile --verify` runs `python -m tuner.runtime.verify BUILD` in a subprocess (the
compiler itself never imports accelerate, deepspeed or torch; this module lives in the runtime,
which may). The tests import the same
functions, so what CI checks and what the tests check cannot drift apart.

What is run, in the build's project directory (where relative paths in the artefacts point):

1. accelerate's `load_config_from_file` on accelerate.yaml;
2. accelerate's launch-environment derivation (`_validate_launch_command`, then `prepare_deepspeed_cmd_env` /
   `prepare_multi_gpu_env`), as `accelerate launch` does, CUDA pretended on a host without GPUs;
3. in that environment, the plugin accelerate builds (`DeepSpeedPlugin` / FSDP plugin), whose
   checks refuse keys set both in the YAML and in deepspeed.json;
4. the "auto" values filled by accelerate's own `deepspeed_config_process` /
   `set_mixed_precision` with what the run would pass (the manifest's settings);
5. DeepSpeed's `DeepSpeedConfig` on the result at the run's data-parallel world size.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import json
import logging
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

from ..compiler.artefacts.emit import ACCELERATE_YAML, DEEPSPEED_JSON, MANIFEST_JSON
from ..compiler.diagnostics import EXIT_INVALID, EXIT_OK, EXIT_USAGE

REQUIRED = ("accelerate", "torch")


class _WorldSize:
    """The smallest `mpu` DeepSpeedConfig accepts: it only asks for the data-parallel size."""

    def __init__(self, n: int):
        self.n = n

    def get_data_parallel_world_size(self) -> int:
        return self.n


def load_accelerate(path: Path):
    from accelerate.commands.config.config_args import load_config_from_file

    return load_config_from_file(str(path))


_DS_COMM_READY = False


def init_deepspeed_comm() -> None:
    """DeepSpeedConfig asks `mpu` for the data-parallel size only once deepspeed.comm is up
    (otherwise it assumes 1). Start a real one-process gloo group, once per process, and again
    if the process destroyed it since (DeepSpeedConfig would then quietly assume 1 rank)."""
    global _DS_COMM_READY
    import torch.distributed as dist

    if _DS_COMM_READY and dist.is_initialized():
        return
    import deepspeed

    if not dist.is_initialized():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        saved = {key: os.environ.get(key) for key in env}
        os.environ.update(env)
        try:
            deepspeed.init_distributed(dist_backend="gloo")
        finally:  # the rank variables must not leak into ranks a caller launches later
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    else:
        deepspeed.init_distributed(dist_backend="gloo")
    _DS_COMM_READY = True


def parse_deepspeed(path_or_dict, world_size: int):
    """DeepSpeed's own config parser, told the run's data-parallel world size."""
    from deepspeed.runtime.config import DeepSpeedConfig

    init_deepspeed_comm()
    config = path_or_dict if isinstance(path_or_dict, dict) else json.loads(Path(path_or_dict).read_text())
    return DeepSpeedConfig(config, mpu=_WorldSize(world_size))


@contextlib.contextmanager
def pretend_cuda(count: int = 8):
    """accelerate's launcher picks another branch without GPUs; pretend them for that step."""
    import torch

    saved = torch.cuda.is_available, torch.cuda.device_count, torch.cuda.current_device
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: count
    torch.cuda.current_device = lambda: 0
    try:
        yield
    finally:
        torch.cuda.is_available, torch.cuda.device_count, torch.cuda.current_device = saved


@contextlib.contextmanager
def ports_free():
    """accelerate's launcher refuses a rendezvous port another process holds on *this* host;
    that is the host's state, not the build's, so verify does not judge it."""
    import accelerate.utils.launch as launch

    saved = launch.is_port_in_use
    launch.is_port_in_use = lambda port=None: False
    try:
        yield
    finally:
        launch.is_port_in_use = saved


def launch_env(flags: list[str], *, check_port: bool = True) -> tuple[argparse.Namespace, dict[str, str]]:
    """accelerate's parsed arguments and each rank's whole environment for `accelerate launch FLAGS
    SCRIPT`, by accelerate's own code (`_validate_launch_command`, `prepare_deepspeed_cmd_env` /
    `prepare_multi_gpu_env`); starts nothing. The one derivation: `--verify` and the runtime's CPU
    launcher call it. `check_port=False`: a port busy on this host is the host's state, not refused."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    with contextlib.nullcontext() if check_port else ports_free():
        args = launch_command_parser().parse_args([*flags, "tuner-worker"])
        args, defaults, mp_from_config = _validate_launch_command(args)
        if args.use_deepspeed:
            fields = [*(defaults.deepspeed_config if defaults else ()), *(["mixed_precision"] if mp_from_config else [])]
            args.deepspeed_fields_from_accelerate_config = ",".join(fields)
            _, env = prepare_deepspeed_cmd_env(args)
        else:
            env = prepare_multi_gpu_env(args)
    return args, dict(env)


def accelerate_launch_env(yaml_path: Path) -> dict[str, str]:
    """The environment `accelerate launch --config_file YAML` would give each rank (`launch_env`)."""
    return launch_env(["--config_file", str(yaml_path)], check_port=False)[1]


@contextlib.contextmanager
def _environ(env: dict[str, str]):
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def fill_auto_as_accelerate(plugin, world_size: int, *, mixed_precision: str, micro_batch: int, accumulation: int,
                            learning_rate: float, weight_decay: float, warmup_steps: int, total_steps: int,
                            hidden_size: int = 1024, trainer_defaults: bool = False) -> dict[str, Any]:
    """The plugin's config (changed in place) with its "auto"s filled by accelerate's own code
    from what the script passes (as `Accelerator._prepare_deepspeed` does): `micro_batch` and
    `accumulation` where the config leaves them "auto"; `hidden_size` stands in for the model's
    (ZeRO bucket sizes); `trainer_defaults`: also the HF Trainer's optimizer betas/eps, which
    accelerate alone refuses. Used by `tuner compile --verify` and the interop tests alike."""
    plugin.set_mixed_precision(mixed_precision)
    plugin.fill_match("gradient_accumulation_steps", must_match=False, gradient_accumulation_steps=accumulation)
    accum = plugin.get_value("gradient_accumulation_steps")
    accum = accum if isinstance(accum, int) else accumulation
    micro = plugin.get_value("train_micro_batch_size_per_gpu")
    micro = micro if isinstance(micro, int) and micro else micro_batch
    kwargs: dict[str, Any] = {
        "gradient_clipping": 1.0,
        "zero_optimization.stage3_gather_16bit_weights_on_model_save": False,
        "train_micro_batch_size_per_gpu": micro,
        "train_batch_size": micro * accum * world_size,
        "zero_optimization.reduce_bucket_size": hidden_size * hidden_size,
        "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * hidden_size * hidden_size),
        "zero_optimization.stage3_param_persistence_threshold": 10 * hidden_size,
        "optimizer.params.lr": learning_rate, "optimizer.params.weight_decay": weight_decay,
        "scheduler.params.warmup_min_lr": 0, "scheduler.params.warmup_max_lr": learning_rate,
        "scheduler.params.warmup_num_steps": warmup_steps, "scheduler.params.total_num_steps": total_steps,
    }
    if trainer_defaults:
        kwargs |= {"optimizer.params.betas": [0.9, 0.999], "optimizer.params.eps": 1e-8}
    plugin.deepspeed_config_process(must_match=False, **kwargs)
    return plugin.deepspeed_config


def fill_for_settings(plugin, settings: dict[str, Any], world_size: int) -> dict[str, Any]:
    """`fill_auto_as_accelerate` with what `tuner run` passes accelerate for `settings`."""
    t = settings["training"]
    return fill_auto_as_accelerate(
        plugin, world_size, mixed_precision=t["mixed_precision"], micro_batch=t["micro_batch_size"],
        accumulation=t["gradient_accumulation_steps"], learning_rate=t["learning_rate"], weight_decay=t["weight_decay"],
        warmup_steps=max(1, t["warmup_steps"]), total_steps=t["max_steps"] or 1)


def accelerate_filled(config: dict[str, Any], settings: dict[str, Any], world_size: int) -> dict[str, Any]:
    """`config` with its "auto" values filled as accelerate fills them for a run of `settings`."""
    from accelerate.utils import DeepSpeedPlugin

    return fill_for_settings(DeepSpeedPlugin(hf_ds_config=copy.deepcopy(config)), settings, world_size)


def verify_build(build_dir: Path) -> list[str]:
    """Run the packages' own checks on a build; returns what they refused (empty = accepted)."""
    build_dir = Path(build_dir).resolve()
    manifest = json.loads((build_dir / MANIFEST_JSON).read_text(encoding="utf-8"))
    plan, settings = manifest["plan"], manifest["settings"]
    problems: list[str] = []
    sf = manifest.get("settings_file")
    project = (build_dir / sf).resolve().parent if sf else build_dir.parent
    try:
        with contextlib.chdir(project):  # where the artefacts' relative paths point
            _verify_in_project(build_dir / ACCELERATE_YAML, plan, settings, problems)
    except Exception as exc:  # the packages' verdict, reported as such
        problems.append(f"{type(exc).__name__}: {exc}")
    return problems


def _verify_in_project(yaml_path: Path, plan: dict, settings: dict, problems: list[str]) -> None:
    steps = "loading accelerate.yaml"
    try:
        load_accelerate(yaml_path)
        steps = "deriving the launch environment"
        import torch

        fake = plan["platform"] != "cpu" and not torch.cuda.is_available()
        with pretend_cuda() if fake else contextlib.nullcontext():
            env = accelerate_launch_env(yaml_path)
        if plan["uses_deepspeed"]:
            steps = "building accelerate's DeepSpeedPlugin"
            from accelerate.utils import DeepSpeedPlugin

            with _environ(env):
                plugin = DeepSpeedPlugin()
                steps = "filling 'auto' values as accelerate does"
                config = fill_for_settings(plugin, settings, plan["data_parallel_size"])
            steps = f"DeepSpeedConfig at data-parallel world size {plan['data_parallel_size']}"
            parse_deepspeed(config, plan["data_parallel_size"])
        elif plan["uses_fsdp"]:
            steps = "building accelerate's FullyShardedDataParallelPlugin"
            from accelerate.utils import FullyShardedDataParallelPlugin

            with _environ(env):
                FullyShardedDataParallelPlugin()
    except Exception as exc:  # the packages' verdict, reported as such
        problems.append(f"{steps}: {type(exc).__name__}: {exc}")


def run_in_subprocess(build_dir: Path, project_dir: Path, uses_deepspeed: bool) -> tuple[int, str]:
    """`python -m tuner.runtime.verify BUILD` in the project directory; (exit status, output).

    Returns (EXIT_USAGE, message) without starting anything when a needed package is missing."""
    need = list(REQUIRED) + (["deepspeed"] if uses_deepspeed else [])
    missing = [name for name in need if importlib.util.find_spec(name) is None]
    if missing:
        return EXIT_USAGE, (f"--verify needs {', '.join(missing)} installed (the packages whose verdict it reports); "
                   "install them (pip install 'tuner-train[deepspeed]') or drop --verify")
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-m", "tuner.runtime.verify", str(build_dir)], cwd=project_dir,
                          capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("verify:", "  "))]
    text = "\n".join(lines) if lines else (proc.stdout + proc.stderr).strip()[-4000:]
    return proc.returncode, text


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        print("usage: python -m tuner.runtime.verify BUILD_DIR...", file=sys.stderr)
        return EXIT_USAGE
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    status = EXIT_OK
    for build in argv:
        problems = verify_build(Path(build))
        if problems:
            status = EXIT_INVALID
            print(f"verify: {build}: refused by the packages' own checks:")
            for p in problems:
                print(f"  {p}")
        elif (Path(build) / DEEPSPEED_JSON).exists():
            print("verify: accelerate and DeepSpeed accept the build")
        else:
            print("verify: accelerate accepts the build")
    return status


if __name__ == "__main__":
    sys.exit(main())
