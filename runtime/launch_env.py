"""What a launcher needs to know before starting ranks: this machine's place in the job
(`Topology`) and the environment accelerate's launcher derives from the compiled YAML
(`accelerate_env`). No torch import at module level.
"""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import dataclass

from ..compiler.keys import paths as K
from .artefacts import Artefacts, RunError

#: Where schedulers put the machine (node) rank, first match wins after the command-line flag.
#: SLURM_NODEID: Slurm (one launcher per node through srun); PET_NODE_RANK: Kubeflow's
#: torch runtimes (Trainer v2 TrainJob and the v1 PyTorchJob); TUNER_MACHINE_RANK: by hand.
MACHINE_RANK_ENV = ("TUNER_MACHINE_RANK", "SLURM_NODEID", "PET_NODE_RANK")
#: Where schedulers put machine 0's address (after the flag; before the compiled value).
MAIN_ADDRESS_ENV = ("TUNER_MAIN_ADDRESS", "PET_MASTER_ADDR")
MAIN_PORT_ENV = ("TUNER_MAIN_PORT", "PET_MASTER_PORT")


def _first_env(names: tuple[str, ...]) -> tuple[str, str] | None:
    for n in names:
        v = os.environ.get(n, "").strip()
        if v:
            return n, v
    return None



@dataclass(frozen=True)
class Entry:
    """What every rank runs: ``python -m MODULE ARGS`` (ranks) for one command."""

    command: str  # "tuner run" / "tuner launch": the prefix of every message
    module: str
    args: tuple[str, ...] = ()
    gpu_argv: tuple[str, ...] | None = None
    """What `accelerate launch` runs on GPUs (None: ``--module MODULE ARGS``)."""
    checkpoints: bool = True
    """Whether the run writes tuner checkpoints (named when it is interrupted)."""

@dataclass(frozen=True)
class Topology:
    num_machines: int
    machine_rank: int
    main_address: str
    main_port: int
    run_id: str

    @classmethod
    def resolve(cls, arts: Artefacts, machine_rank: int | None = None, main_address: str | None = None,
                main_port: int | None = None) -> Topology:
        """Flag, else the scheduler's environment, else the compiled value."""
        topo = arts.manifest.get("topology", {})
        n = int(topo.get("num_machines", 1) or 1)
        source = "--machine-rank"
        if machine_rank is None:
            found = _first_env(MACHINE_RANK_ENV) if n > 1 else None
            if found:
                source, raw = found
                try:
                    machine_rank = int(raw)
                except ValueError:
                    raise RunError(f"${source} = {raw!r} is not a machine rank (an integer)") from None
            else:
                source, machine_rank = K.HARDWARE_MACHINE_RANK, int(topo.get("machine_rank", 0) or 0)
        if not 0 <= machine_rank < n:
            raise RunError(f"machine rank {machine_rank} (from {source}) must be in 0..{n - 1}: "
                           f"the build is compiled for {n} machine(s) (hardware.num_machines)")
        if main_address is None:
            found = _first_env(MAIN_ADDRESS_ENV)
            main_address = found[1] if found else str(topo.get("main_process_ip") or "")
        if not main_address:
            if n > 1:
                raise RunError("machine 0's address is unknown: pass --main-address HOST (or set "
                               "$TUNER_MAIN_ADDRESS), or compile with hardware.main_process_ip")
            main_address = "127.0.0.1"
        if main_port is None:
            found = _first_env(MAIN_PORT_ENV)
            try:
                main_port = int(found[1]) if found else int(topo.get("main_process_port") or 29500)
            except ValueError:
                name, raw = found or (K.HARDWARE_MAIN_PROCESS_PORT, str(topo.get("main_process_port")))
                raise RunError(f"${name} = {raw!r} is not a port number") from None
        # Every machine's launcher must name the same rendezvous; a scheduler's job id
        # keeps two jobs from one build apart.
        job = os.environ.get("TUNER_RUN_ID") or os.environ.get("SLURM_JOB_ID") or ""
        digest = hashlib.sha256(f"{arts.manifest.get('settings_sha256', '')}:{main_port}:{job}".encode()).hexdigest()
        return cls(n, machine_rank, main_address, main_port, f"tuner-{digest[:12]}")

    def accelerate_flags(self) -> list[str]:
        """The flags that put `accelerate launch` at this machine's place in the job."""
        if self.num_machines <= 1:
            return ["--main_process_port", str(self.main_port)]
        return ["--machine_rank", str(self.machine_rank), "--main_process_ip", self.main_address,
                "--main_process_port", str(self.main_port)]


def config_flags(arts: Artefacts) -> list[str]:
    """`accelerate launch` flags naming the compiled files by absolute path: the YAML names
    deepspeed.json relative to the project directory, which need not be the working directory."""
    flags = ["--config_file", str(arts.accelerate_yaml.resolve())]
    if arts.deepspeed_json is not None:
        flags += ["--deepspeed_config_file", str(arts.deepspeed_json.resolve())]
    return flags


def accelerate_env(arts: Artefacts, topo: Topology | None = None, check_port: bool | None = None) -> dict[str, str]:
    """The variables `accelerate launch --config_file <yaml>` would set for this config.

    accelerate's own code derives them (`tuner.runtime.verify.launch_env`, the derivation
    `tuner compile --verify` runs too); only the variables that differ from this process's
    environment are returned. On CPU targets ``ACCELERATE_USE_CPU`` is added: the ranks are gloo
    ranks and `cpu_shim` restores the FSDP/DeepSpeed state accelerate leaves out on CPU.
    """
    from .verify import launch_env

    argv = config_flags(arts)
    if topo is not None:
        argv += topo.accelerate_flags()
    # accelerate refuses a busy main port on machine 0; tuner's own rendezvous is about to
    # bind it on this very machine, so that check says nothing here.
    # (`check_port=False`: the run plan's, made before tuner's launcher picks a free port itself.)
    machine0 = topo is not None and topo.num_machines > 1 and topo.machine_rank == 0
    args, env = launch_env(argv, check_port=not machine0 if check_port is None else check_port)
    changed = {k: v for k, v in env.items() if os.environ.get(k) != v and k != "PYTHONPATH"}
    if arts.plan.platform == "cpu" or args.use_cpu:
        changed["ACCELERATE_USE_CPU"] = "true"
    return changed


def use_gpu_launcher(arts: Artefacts) -> bool:
    if arts.plan.platform == "cpu":
        return False
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def rank_threads(nproc: int) -> dict[str, str]:
    """OMP_NUM_THREADS for CPU ranks: the person's own setting wins (accelerate launch's rule);
    unset, the machine's cores shared among the ranks."""
    if os.environ.get("OMP_NUM_THREADS"):
        return {}
    return {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // nproc))}


def free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RunError("no free TCP port for the rendezvous")


#: The one line that makes the HF Trainer's save_model() write a model under a sharded FSDP build.
TRAINER_SAVE_FIX = 'trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")'


def trainer_save_note(arts: Artefacts, target: list[str]) -> str | None:
    """A note for `tuner launch` when the build keeps FSDP state sharded and the script calls
    the HF Trainer's `save_model()`, which then writes nothing (transformers saves a model
    under FSDP only from a FULL_STATE_DICT plugin) and says nothing. None otherwise."""
    if not (arts.settings.fsdp.enabled and arts.settings.checkpoint.state_dict_type == "sharded"):
        return None
    try:
        if target[0] == "-m":
            import importlib.util

            spec = importlib.util.find_spec(target[1])
            origin = spec.origin if spec is not None else None
        else:
            origin = target[0]
        text = open(origin, encoding="utf-8", errors="replace").read() if origin else ""  # noqa: SIM115
    except (ImportError, ValueError, OSError):
        return None
    import re

    if not (re.search(r"Trainer\b", text) and re.search(r"\bsave_model\s*\(", text)):
        return None
    return ("note: this build keeps FSDP state sharded (checkpoint.state_dict_type = \"sharded\"), under which "
            "the HF Trainer's save_model() writes no model, silently. Before trainer.save_model(), add: "
            f"{TRAINER_SAVE_FIX}  (or compile with checkpoint.state_dict_type = \"full\", which makes every "
            "checkpoint gather the full model)")


def port_taken(port: int) -> bool:
    """Whether something on this machine already listens on TCP `port` (any address), so that
    machine 0 cannot host the rendezvous there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a TIME_WAIT leftover is no obstacle
        try:
            s.bind(("", port))
        except OSError:
            return True
    return False


def port_taken_message(command: str, port: int) -> str:
    return (f"{command}: the rendezvous port {port} on this machine (machine 0) is taken: another job or "
            f"program listens there. Choose a free one: hardware.main_process_port, --main-port PORT or "
            f"$TUNER_MAIN_PORT (every machine must use the same port)")

