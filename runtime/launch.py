"""Starting the ranks of a run from the compiled artefacts.

* GPUs: accelerate's own launcher with the compiled YAML
  (``accelerate launch --config_file build/accelerate.yaml -m tuner.runtime.worker ...``).
* CPU only: ``accelerate launch`` would start independent single-process runs for an
  FSDP/DeepSpeed config (docs/cpu-distributed-facts.md), so real gloo ranks are started
  with torch's elastic launcher (what ``torchrun`` uses), each with the environment
  accelerate's launcher derives from the same YAML (`accelerate_env`).

A rank that dies ends the run: the elastic agent notices within `MONITOR_INTERVAL_S`, stops
the others (SIGTERM, then SIGKILL after `STOP_GRACE_S`), and `launch` returns non-zero with
a message naming the rank. Ranks blocked in a collective also fail on their own after the
process-group timeout, and exit when their launcher disappears (worker's orphan watchdog).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import uuid

from .artefacts import Artefacts, RunError

MONITOR_INTERVAL_S = 0.5
STOP_GRACE_S = 10
#: Upper bound from a rank's death to `tuner run` exiting (monitor + grace + teardown slack).
DEATH_BOUND_S = MONITOR_INTERVAL_S + STOP_GRACE_S + 20


def accelerate_env(arts: Artefacts) -> dict[str, str]:
    """The variables `accelerate launch --config_file <yaml>` would set for this config."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    args = launch_command_parser().parse_args(["--config_file", str(arts.accelerate_yaml), "tuner-worker"])
    args, defaults, mp_from_config = _validate_launch_command(args)
    if args.use_deepspeed:
        fields = list(defaults.deepspeed_config.keys()) if defaults else []
        if mp_from_config:
            fields.append("mixed_precision")
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        _, env = prepare_deepspeed_cmd_env(args)
    else:
        env = prepare_multi_gpu_env(args)
    changed = {k: v for k, v in env.items() if os.environ.get(k) != v and k != "PYTHONPATH"}
    if arts.plan.platform == "cpu" or args.use_cpu:
        changed["ACCELERATE_USE_CPU"] = "true"
    return changed


def _free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RunError("no free TCP port for the rendezvous")


def worker_args(arts: Artefacts, resume: str, max_steps: int | None) -> list[str]:
    out = [str(arts.build_dir)]
    if resume:
        out += ["--resume", resume]
    if max_steps is not None:
        out += ["--max-steps", str(max_steps)]
    return out


def use_gpu_launcher(arts: Artefacts) -> bool:
    if arts.plan.platform == "cpu":
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def launch(arts: Artefacts, resume: str = "", max_steps: int | None = None) -> int:
    """Run every rank of this machine to the end; returns the exit status for `tuner run`.

    Ranks start in the project directory (where the settings file is): the artefacts name
    deepspeed.json and NVMe swap paths relative to it, as `accelerate launch --config_file
    build/accelerate.yaml` run from the project root reads them."""
    if resume and os.path.exists(resume):
        resume = os.path.abspath(resume)  # given relative to the caller's working directory
    with contextlib.chdir(arts.base_dir):
        if use_gpu_launcher(arts):
            return _launch_accelerate(arts, resume, max_steps)
        if arts.plan.platform not in ("cpu",) and arts.plan.platform != "auto":
            print(f"tuner run: the artefacts target {arts.plan.platform} but no GPU is visible; "
                  f"running on CPU gloo ranks instead", file=sys.stderr)
        return _launch_cpu(arts, resume, max_steps)


def _launch_accelerate(arts: Artefacts, resume: str, max_steps: int | None) -> int:
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(arts.accelerate_yaml),
           "--module", "tuner.runtime.worker", *worker_args(arts, resume, max_steps)]
    return subprocess.call(cmd)


def _launch_cpu(arts: Artefacts, resume: str, max_steps: int | None) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    topo = arts.manifest.get("topology", {})
    if int(topo.get("num_machines", 1)) > 1:
        raise RunError("multi-machine runs on CPU-only hosts are not supported by tuner run; "
                       "compile with hardware.num_machines = 1, or run on GPU machines")
    nproc = max(1, int(arts.plan.processes_per_machine))
    env = accelerate_env(arts)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    os.environ.update(env)
    port = _free_port(int(topo.get("main_process_port") or 29500))
    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"tuner-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{port}", rdzv_configs={"timeout": 120},
        max_restarts=0, monitor_interval=MONITOR_INTERVAL_S, start_method="spawn",
    )
    try:
        import torch.distributed.launcher.api as api

        if hasattr(api, "_DEFAULT_STOP_TIMEOUT"):
            api._DEFAULT_STOP_TIMEOUT = STOP_GRACE_S  # pragma: no cover - only where torch exposes it
    except Exception:
        pass
    try:
        elastic_launch(config, sys.executable)("-m", "tuner.runtime.worker", *worker_args(arts, resume, max_steps))
    except ChildFailedError as exc:
        return _report_failure(exc)
    return 0


def _report_failure(exc) -> int:
    failures = exc.failures or {}
    if not failures:
        print("tuner run: a rank failed", file=sys.stderr)
        return 1
    first_rank, first = min(failures.items(), key=lambda kv: kv[1].timestamp)
    codes = sorted({f.exitcode for f in failures.values()})
    if all(f.exitcode == 2 for f in failures.values()):
        return 2  # a user error, already printed by rank 0
    desc = f"killed by signal {first.signal_name()}" if first.exitcode < 0 else f"exit code {first.exitcode}"
    print(f"tuner run: rank {first_rank} failed ({desc}); the run was stopped on every rank "
          f"(exit codes {codes}). See the rank's output above.", file=sys.stderr)
    return first.exitcode if first.exitcode > 0 else 1
