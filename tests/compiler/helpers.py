"""Loading compiled artefacts with the real accelerate and DeepSpeed parsers."""

from __future__ import annotations

import json
import os
from pathlib import Path


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


def _init_deepspeed_comm() -> None:
    """DeepSpeedConfig asks the data-parallel size of `mpu` only once deepspeed.comm is up
    (otherwise it assumes 1). Start a real one-process gloo group, once per session."""
    global _DS_COMM_READY
    if _DS_COMM_READY:
        return
    import socket

    import deepspeed

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        deepspeed.init_distributed(dist_backend="gloo")
    finally:  # the rank variables must not leak into ranks other tests launch
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    _DS_COMM_READY = True


def parse_deepspeed(path_or_dict, world_size: int):
    """DeepSpeed's own config parser, told the run's data-parallel world size."""
    from deepspeed.runtime.config import DeepSpeedConfig

    _init_deepspeed_comm()

    config = path_or_dict if isinstance(path_or_dict, dict) else json.loads(Path(path_or_dict).read_text())
    return DeepSpeedConfig(config, mpu=_WorldSize(world_size))


def accelerate_launch_env(yaml_path: Path, monkeypatch=None) -> dict[str, str]:
    """The environment `accelerate launch --config_file YAML` would give each rank.

    Runs accelerate's own argument validation and env preparation (no processes started).
    For DeepSpeed it also constructs accelerate's DeepSpeedPlugin in that environment,
    which is where accelerate refuses keys it forbids beside a config file.
    """
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    args = launch_command_parser().parse_args(["--config_file", str(yaml_path), "train.py"])
    args, defaults, mp_from_config = _validate_launch_command(args)
    if args.use_deepspeed:
        fields = list(defaults.deepspeed_config.keys()) + (["mixed_precision"] if mp_from_config else [])
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        _, env = prepare_deepspeed_cmd_env(args)
        if monkeypatch is not None:
            for key, value in env.items():
                monkeypatch.setenv(key, value)
            from accelerate.utils import DeepSpeedPlugin

            DeepSpeedPlugin()  # raises if the YAML repeats a key accelerate forbids
        return dict(env)
    if args.multi_gpu or args.use_fsdp:
        return dict(prepare_multi_gpu_env(args))
    return {k: v for k, v in os.environ.items() if k.startswith("ACCELERATE_")}
