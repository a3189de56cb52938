"""Declared settings: where the run happens and how it is launched: hardware, accelerate, cluster.

Each field is one key, declared once with `setting` (see `compiler/keys/declare.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .. import patterns, spellings
from ..choices import ClusterType, DynamoBackend, PlatformChoice, RdzvBackend
from ..declare import setting


@dataclass(frozen=True)
class HardwareSettings:
    """Where the run happens: target platform and topology."""

    title: ClassVar[str] = "Hardware"
    step: ClassVar[str] = "hardware"
    platform: PlatformChoice = setting(
        "auto", aliases=("platform",),
        spellings=spellings.lower, order=0,
        help="Target platform; auto detects it on the compiling machine (without importing torch). State "
             "it when compiling elsewhere, e.g. in CI.")
    num_processes: int = setting(
        1, aliases=("num_processes",), minimum=1, accelerate=("num_processes",), order=1,
        help="Total ranks across all machines (GPUs, or CPU processes when there is no GPU).")
    num_machines: int = setting(
        1, aliases=("num_machines",), minimum=1, accelerate=("num_machines",), order=2,
        help="Machines (nodes) in the run.")
    machine_rank: int = setting(
        0, aliases=("machine_rank",), minimum=0, accelerate=("machine_rank",), order=3,
        help="This machine's index, 0 .. num_machines-1.")
    main_process_ip: str = setting(
        "", aliases=("main_process_ip",), accelerate=("main_process_ip",), pattern=patterns.HOST,
        order=4,
        help="Address of machine 0 (required with more than one machine).")
    main_process_port: int = setting(
        29500, aliases=("main_process_port",), minimum=1, maximum=65535, accelerate=("main_process_port",),
        order=5,
        help="Rendezvous port on machine 0.")
    rdzv_backend: RdzvBackend = setting(
        "static", aliases=("rdzv_backend",), accelerate=("rdzv_backend",),
        order=6,
        help="Rendezvous backend.")
    same_network: bool = setting(
        True, aliases=("same_network",), accelerate=("same_network",), order=7,
        help="All machines on one local network.")
    gpu_ids: str = setting(
        "all", aliases=("gpu_ids",), spellings=spellings.gpu_ids, accelerate=("gpu_ids",),
        help="Which GPUs of each machine the launch uses: \"all\", or a comma-separated list of device "
             "indices (\"0,1\"), as accelerate's gpu_ids.")
    gpu_memory_gib: float = setting(
        0, aliases=("gpu_memory_gib",), minimum=0, order=8,
        help="Memory per GPU for the fit check; 0 uses what tuner doctor detects.")
    host_memory_gib: float = setting(
        0, aliases=("host_memory_gib",), minimum=0, order=9,
        help="Host RAM per machine for the fit check; 0 uses what is detected.")


@dataclass(frozen=True)
class AccelerateSettings:
    """How the accelerate config is produced."""

    title: ClassVar[str] = "Accelerate"
    step: ClassVar[str] = "hardware"
    base: str = setting(
        "", aliases=("base", "accelerate_config", "base_config"),
        help="An existing accelerate YAML to merge into; its other keys survive.")
    dynamo_backend: DynamoBackend = setting(
        "no", aliases=("dynamo_backend",),
        help="torch dynamo backend accelerate applies.")
    parallelism_config: dict[str, Any] = setting(
        {}, aliases=("parallelism_config",),
        help="accelerate's parallelism_config keys other than context parallelism "
             "(parallelism_config_tp_size, _dp_replicate_size, _dp_shard_size, _sp_size, _sp_backend, "
             "...), written into accelerate.yaml as given. Context parallelism is context_parallel.size.")


@dataclass(frozen=True)
class ClusterSettings:
    """How the job is started on several machines: a Slurm batch script or Kubernetes manifests beside the
    artefacts (launch.sh is always written for multi-machine builds)."""

    title: ClassVar[str] = "Cluster"
    step: ClassVar[str] = "hardware"
    type: ClusterType = setting(
        "none", aliases=("cluster_scheduler",),
        help="none: launch.sh only (one command per machine); slurm: also slurm.sbatch (one launcher per "
             "node through srun); kubernetes: also a Kubeflow Trainer v2 TrainJob and a v1 PyTorchJob.")
    job_name: str = setting(
        "tuner", aliases=("job_name",), pattern=patterns.JOB_NAME,
        help="Name of the Slurm job or Kubernetes resource (lower-case letters, digits, '-').")
    script: list[str] = setting(
        [], aliases=("launch_script",),
        help="What each machine runs: empty for tuner's own trainer (tuner run); else your script and its "
             "arguments (tuner launch BUILD_DIR SCRIPT ARGS...), or [\"-m\", \"MODULE\", ...].")
    partition: str = setting(
        "", aliases=("slurm_partition",), pattern=patterns.SLURM_NAME,
        help="Slurm partition (#SBATCH --partition); empty: the cluster's default.")
    time: str = setting(
        "", aliases=("slurm_time",), pattern=patterns.SLURM_TIME,
        help="Slurm time limit (#SBATCH --time), e.g. 02:00:00 or 1-00:00:00; empty: the partition's "
             "default.")
    account: str = setting(
        "", aliases=("slurm_account",), pattern=patterns.SLURM_NAME,
        help="Slurm account to charge (#SBATCH --account); empty: your default.")
    image: str = setting(
        "", aliases=("kubernetes_image",), pattern=patterns.IMAGE,
        help="Container image for Kubernetes, with tuner, torch and the build directory inside (or mounted"
             " at the same path).")
    namespace: str = setting(
        "default", aliases=("kubernetes_namespace",), pattern=patterns.DNS_LABEL,
        help="Kubernetes namespace of the TrainJob / PyTorchJob.")
