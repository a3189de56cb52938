"""The launch files `tuner compile` writes beside the artefacts (compiler/artefacts/cluster.py), checked
in-process: shell scripts pass `bash -n` and shellcheck, Kubernetes manifests validate against
the operators' own CRDs (tests/launch/crds/, see PROVENANCE.md) with unknown fields refused,
and launch.sh really starts a machine (a dry run with a stand-in Python)."""

from __future__ import annotations

import copy
import gzip
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from tuner.compiler.artefacts import cluster
from tuner.compiler.compile import compile_text

from tests.debian import install_command

CRDS = Path(__file__).resolve().parent / "crds"

MULTI = {"num_processes": 4, "num_machines": 2, "main_process_ip": "10.1.2.3", "main_process_port": 29555}
CASES = {
    "cpu-slurm": ({"platform": "cpu", **MULTI}, {"type": "slurm", "partition": "cpu", "time": "01:00:00",
                                                  "account": "proj"}),
    "cuda-slurm-script": ({"platform": "cuda", **MULTI},
                          {"type": "slurm", "script": ["train.py", "--lr", "1e-4", "--name", "it's"]}),
    "cuda-k8s": ({"platform": "cuda", **MULTI}, {"type": "kubernetes", "image": "registry/tuner:1",
                                                "namespace": "ml", "job_name": "llama-sft"}),
    "cpu-k8s-module": ({"platform": "cpu", **MULTI}, {"type": "kubernetes", "script": ["-m", "my.train"]}),
    "cpu-bare": ({"platform": "cpu", **MULTI}, {}),
    "one-machine-slurm": ({"platform": "cuda", "num_processes": 8}, {"type": "slurm"}),
}


def _toml(hw: dict, cl: dict) -> str:
    def val(v):
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return repr(v)

    text = "[hardware]\n" + "".join(f"{k} = {val(v)}\n" for k, v in hw.items())
    if cl:
        text += "[cluster]\n" + "".join(f"{k} = {val(v)}\n" for k, v in cl.items())
    return text


def _compile(tmp_path: Path, name: str):
    hw, cl = CASES[name]
    r = compile_text(_toml(hw, cl), path=tmp_path / "settings.toml", out_dir=tmp_path / "build")
    assert r.ok, [d.message for d in r.diagnostics.items if d.severity == "error"]
    return r


@pytest.mark.parametrize("name", sorted(CASES))
def test_shell_scripts_are_clean(tmp_path, name):
    r = _compile(tmp_path, name)
    scripts = [n for n in (cluster.LAUNCH_SH, cluster.SLURM_SBATCH) if n in r.files]
    assert cluster.LAUNCH_SH in scripts
    assert (cluster.SLURM_SBATCH in scripts) == (CASES[name][1].get("type") == "slurm")
    for n in scripts:
        p = tmp_path / n
        p.write_text(r.files[n])
        b = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True, timeout=30)
        assert b.returncode == 0, b.stderr
        if shutil.which("shellcheck") is None:
            pytest.skip(f"shellcheck is not installed; {install_command('shellcheck')}; bash -n passed")
        s = subprocess.run(["shellcheck", "-s", "bash", str(p)], capture_output=True, text=True, timeout=60)
        assert s.returncode == 0, s.stdout


def test_slurm_directives_follow_the_target(tmp_path):
    cpu = _compile(tmp_path / "a", "cpu-slurm").files[cluster.SLURM_SBATCH]
    gpu = _compile(tmp_path / "b", "cuda-slurm-script").files[cluster.SLURM_SBATCH]
    assert "--gpus-per-node" not in cpu and "NCCL" not in cpu
    assert "#SBATCH --gpus-per-node=2\n" in gpu and "TORCH_NCCL_ASYNC_ERROR_HANDLING" in gpu
    for text in (cpu, gpu):
        assert "#SBATCH --nodes=2\n" in text and "#SBATCH --ntasks-per-node=1\n" in text
        assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1' in text
        assert "srun --nodes=2 --ntasks-per-node=1" in text
    assert "#SBATCH --partition=cpu\n#SBATCH --time=01:00:00\n#SBATCH --account=proj\n" in cpu
    assert "set -- launch \"$build_dir\" train.py --lr 1e-4 --name 'it'\"'\"'s'" in gpu


def test_one_machine_builds_without_a_scheduler_have_no_launch_files(tmp_path):
    r = compile_text(_toml({"platform": "cpu", "num_processes": 2}, {}), out_dir=tmp_path)
    assert r.ok and not set(cluster.ALL) & set(r.files)


def test_launch_sh_starts_the_machine_it_is_given(tmp_path):
    """Run launch.sh with a stand-in Python that prints its arguments: the machine rank goes
    before the build directory, a script and its own flags after it. The build directory is
    the folder launch.sh is in, wherever the build was copied, whatever the caller's cwd."""
    r = _compile(tmp_path, "cpu-bare")
    copied = tmp_path / "elsewhere" / "the build"
    copied.mkdir(parents=True)
    (copied / "launch.sh").write_text(r.files[cluster.LAUNCH_SH])
    fake = tmp_path / "fakepython"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "TUNER_PYTHON": str(fake)}

    def argv(*args):
        p = subprocess.run(["bash", str(copied / "launch.sh"), *args], capture_output=True, text=True,
                           env=env, timeout=30, cwd="/")
        return p.returncode, p.stdout.split("\n")[:-1], p.stderr

    build = str(copied)
    assert argv("1")[1] == ["-m", "tuner", "run", "--machine-rank", "1", build]
    assert argv("0", "train.py", "--machine-rank", "9")[1] == [
        "-m", "tuner", "launch", "--machine-rank", "0", build, "train.py", "--machine-rank", "9"]
    rc, _, err = argv()
    assert rc == 2 and "usage" in err


def _strict(schema):
    """Kubernetes prunes fields a structural schema does not declare: refuse them instead."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(x) for x in schema]
    return schema


def _crd_schema(file: str, version: str) -> dict:
    crd = yaml.safe_load(gzip.open(CRDS / file, "rt", encoding="utf-8"))
    v = next(x for x in crd["spec"]["versions"] if x["name"] == version)
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    schema = _strict(copy.deepcopy(v["schema"]["openAPIV3Schema"]))
    schema["properties"]["apiVersion"] = {"const": f"{group}/{version}"}
    schema["properties"]["kind"] = {"const": kind}
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
    return schema


TRAINJOB = _crd_schema("trainer.kubeflow.org_trainjobs.yaml.gz", "v1alpha1")
PYTORCHJOB = _crd_schema("kubeflow.org_pytorchjobs.yaml.gz", "v1")


@pytest.mark.parametrize("name", ["cuda-k8s", "cpu-k8s-module"])
def test_kubernetes_manifests_validate_against_the_operators_crds(tmp_path, name):
    r = _compile(tmp_path, name)
    tj = yaml.safe_load(r.files[cluster.TRAINJOB_YAML])
    pj = yaml.safe_load(r.files[cluster.PYTORCHJOB_YAML])
    jsonschema.validate(tj, TRAINJOB)
    jsonschema.validate(pj, PYTORCHJOB)
    assert tj["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert (tj["spec"]["trainer"]["numNodes"], tj["spec"]["trainer"]["numProcPerNode"]) == (2, 2)
    assert pj["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    assert pj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    gpu = name.startswith("cuda")
    assert ("resourcesPerNode" in tj["spec"]["trainer"]) == gpu
    # The strict schema does refuse a field the CRD does not define.
    bad = copy.deepcopy(tj)
    bad["spec"]["trainer"]["replicas"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, TRAINJOB)


def test_a_scheduler_supplies_machine_0s_address(tmp_path):
    hw = {"platform": "cpu", "num_processes": 4, "num_machines": 2}
    bare = compile_text(_toml(hw, {}), out_dir=tmp_path / "a")
    assert not bare.ok and any(d.key == "hardware.main_process_ip" for d in bare.diagnostics.items)
    slurm = compile_text(_toml(hw, {"type": "slurm"}), out_dir=tmp_path / "b")
    assert slurm.ok and cluster.SLURM_SBATCH in slurm.files
