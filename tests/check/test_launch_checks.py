"""`tuner check --launch-only`: the launch checks, before any rank starts (no torch on CPU
targets, so each case is a quick subprocess). Each seeded launch fault is named, with its
machine and a fix, exit 1; the same build without the fault passes (exit 0). Two launchers
on localhost stand for two machines: they meet at machine 0's address and port and compare
their builds, versions and scripts."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
from check_helpers import CPU2, check, compile_build, faults, finish, free_port, start, two_machines

from tests import harness

SCRIPT_BODY = "print('train')\n"


@pytest.fixture()
def build(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT_BODY)
    return compile_build(tmp_path, CPU2)


def _fault(report: dict, name: str, where: str | None = None) -> dict:
    found = faults(report).get(name)
    assert found, f"no {name} fault in {json.dumps(report.get('faults'), indent=1)}"
    if where:
        assert any(where in f["where"] for f in found), found
    assert all(f["fix"] for f in found)
    return found[0]


def test_a_sound_build_passes(tmp_path, build):
    rc, report, err = check("--launch-only", str(build), "train.py", cwd=tmp_path)
    assert rc == 0, (report, err)
    assert report["ok"] and not report["faults"]
    names = {f["check"] for f in report["findings"]}
    assert {"build", "versions", "script", "output", "disk", "host-ram", "network-interface"} <= names
    assert report["timings_s"]["launch checks"] < 15


def test_a_settings_file_is_compiled_first(tmp_path):
    """`tuner check SETTINGS.toml` compiles it into build/ beside it, as `tuner run` does
    (it said "build directory not found"); a settings file that does not compile is named."""
    from check_helpers import write_settings

    (tmp_path / "train.py").write_text(SCRIPT_BODY)
    settings = write_settings(tmp_path, CPU2)
    rc, report, err = check("--launch-only", str(settings), "train.py", cwd=tmp_path)
    assert rc == 0, (report, err)
    assert (tmp_path / "build" / "manifest.json").is_file()
    assert "build" in {f["check"] for f in report["findings"] if f["status"] == "ok"}
    (tmp_path / "bad.toml").write_text("[training]\nlearning_rate = -1\n")
    rc, report, err = check("--launch-only", str(tmp_path / "bad.toml"), "train.py", cwd=tmp_path)
    assert rc == 1 and report == {} and "learning_rate" in err and "build directory not found" not in err, err


def test_missing_script(tmp_path, build):
    rc, report, _ = check("--launch-only", str(build), "no_such_train.py", cwd=tmp_path)
    assert rc == 1
    assert "no_such_train.py" in _fault(report, "script", "machine 0")["saw"]


def test_missing_module(tmp_path, build):
    rc, report, _ = check("--launch-only", str(build), "-m", "no_such_module_xyz", cwd=tmp_path)
    assert rc == 1
    _fault(report, "script")


def test_missing_build(tmp_path):
    rc, report, _ = check("--launch-only", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert rc == 1
    assert "not found" in _fault(report, "build", "machine 0")["saw"]


def test_missing_model_and_data_paths(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 128, "hidden_size": 16,
        "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
        "max_position_embeddings": 64}))
    (tmp_path / "train.jsonl").write_text('{"text": "hello"}\n')
    build = compile_build(tmp_path, CPU2, {"model": {"path": "model"}, "data": {"path": "train.jsonl"}})
    rc, report, _ = check("--launch-only", str(build), cwd=tmp_path)
    assert rc == 0, report["faults"]
    shutil.rmtree(model)
    (tmp_path / "train.jsonl").unlink()  # not copied to this machine
    rc, report, _ = check("--launch-only", str(build), cwd=tmp_path)
    assert rc == 1
    assert "model.path" in _fault(report, "model-path")["saw"]
    assert "data.path" in _fault(report, "data-path")["saw"]


def test_version_differs_from_the_build(tmp_path, build):
    # Another accelerate on this machine: a distribution record first on the path, as a
    # second site-packages (a user install, a stale environment) puts it.
    fake = tmp_path / "fake-site"
    (fake / "accelerate-1.14.0.dist-info").mkdir(parents=True)
    (fake / "accelerate-1.14.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: accelerate\nVersion: 1.14.0\n")
    rc, report, _ = check("--launch-only", str(build), cwd=tmp_path,
                          extra_env={"PYTHONPATH": f"{fake}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert rc == 1
    assert "accelerate 1.14.0" in _fault(report, "versions", "machine 0")["saw"]


def test_unwritable_output(tmp_path):
    # A regular file where the output directory should be (a read-only mount gives the same
    # error class; root ignores permission bits, so those cannot seed it here).
    (tmp_path / "taken").write_text("not a directory")
    build = compile_build(tmp_path, CPU2, {"output": {"dir": "taken/run"}})
    rc, report, _ = check("--launch-only", str(build), cwd=tmp_path)
    assert rc == 1
    assert "Not a directory" in _fault(report, "output")["saw"]


def _mount_tmpfs(path, options: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True).returncode == 0


def test_full_disk_and_read_only_output(tmp_path):
    full, ro = tmp_path / "full", tmp_path / "ro"
    if not _mount_tmpfs(full, "size=64k"):
        pytest.skip("cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN)")
    try:
        assert _mount_tmpfs(ro, "size=64k,ro")
        (full / "filler").write_bytes(b"\0" * 60 * 1024)  # a nearly full disk
        build = compile_build(tmp_path / "a", CPU2, {"output": {"dir": str(full / "run")}})
        rc, report, _ = check("--launch-only", str(build), cwd=tmp_path)
        assert rc == 1
        assert "one checkpoint needs" in _fault(report, "disk")["saw"]
        build = compile_build(tmp_path / "b", CPU2, {"output": {"dir": str(ro / "run")}})
        rc, report, _ = check("--launch-only", str(build), cwd=tmp_path)
        assert rc == 1
        assert "Read-only" in _fault(report, "output")["saw"]
    finally:
        for p in (full, ro):
            subprocess.run(["umount", str(p)], capture_output=True)


def test_too_little_host_ram(tmp_path, build):
    # The target's RAM stated through the hardware facts the estimate reads (2 MiB available).
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"platform": "cpu", "host_memory_bytes": 4 << 20, "host_available_bytes": 2 << 20,
                                 "hostname": socket.gethostname()}))
    rc, report, _ = check("--launch-only", str(build), cwd=tmp_path, extra_env={"TUNER_HARDWARE_FACTS": str(facts)})
    assert rc == 1
    f = _fault(report, "host-ram", "machine 0")
    assert "the plan needs" in f["saw"] and "tuner estimate" in f["fix"]


def test_socket_interface_that_does_not_exist(tmp_path, build):
    rc, report, _ = check("--launch-only", str(build), cwd=tmp_path, extra_env={"GLOO_SOCKET_IFNAME": "nosuch0"})
    assert rc == 1
    assert "nosuch0" in _fault(report, "network-interface")["saw"]


def test_gpu_build_on_a_machine_without_gpus(tmp_path):
    build = compile_build(tmp_path, {"hardware": {"platform": "cuda", "num_processes": 2, "gpu_memory_gib": 80}})
    rc, report, _ = check("--launch-only", str(build), cwd=tmp_path)
    assert rc == 1
    assert "0 GPU(s) visible" in _fault(report, "gpus", "machine 0")["saw"]


def test_port_taken_on_machine_0(tmp_path):
    port = free_port()
    build = compile_build(tmp_path, two_machines(port))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen(1)
        rc, report, _ = check("--launch-only", "--machine-rank", "0", str(build), cwd=tmp_path)
    assert rc == 1
    assert "already in use" in _fault(report, "port", "machine 0")["saw"]


def test_wrong_main_address(tmp_path):
    # 192.0.2.1 (TEST-NET-1) is nobody's address: machine 0 cannot listen there.
    build = compile_build(tmp_path, two_machines(free_port(), main_process_ip="192.0.2.1"))
    rc, report, _ = check("--launch-only", "--machine-rank", "0", str(build), cwd=tmp_path)
    assert rc == 1
    assert "192.0.2.1" in _fault(report, "address", "machine 0")["saw"]


def test_machine_0_unreachable_and_machine_1_missing(tmp_path):
    build = compile_build(tmp_path, two_machines(free_port()))
    fast = {"TUNER_CHECK_WAIT": "2"}
    rc, report, _ = check("--launch-only", "--machine-rank", "1", str(build), cwd=tmp_path, extra_env=fast)
    assert rc == 1
    assert "cannot reach machine 0" in _fault(report, "port", "machine 1")["saw"]
    # Machine 0 alone (the Slurm job that started one node): machine 1 never reports.
    rc, report, _ = check("--launch-only", "--machine-rank", "0", str(build), cwd=tmp_path, extra_env=fast)
    assert rc == 1
    assert "did not report" in _fault(report, "port", "machine 1")["saw"]


def _two(tmp_path, build0, build1, *script, cwd1=None, env1=None, machine1_build=None):
    port_env = {"TUNER_CHECK_WAIT": "10"}
    m0 = start("--launch-only", "--machine-rank", "0", str(build0), *script, cwd=tmp_path, extra_env=port_env)
    time.sleep(0.5)
    m1 = start("--launch-only", "--machine-rank", "1", str(build1), *script, cwd=cwd1 or tmp_path,
               extra_env={**port_env, **(env1 or {})})
    return finish(m0), finish(m1)


def test_two_machines_pass_together(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT_BODY)
    build = compile_build(tmp_path, two_machines(free_port()))
    (rc0, r0, e0), (rc1, r1, e1) = _two(tmp_path, build, build, "train.py")
    assert (rc0, rc1) == (0, 0), (r0.get("faults"), r1.get("faults"), e0[-2000:], e1[-2000:])
    assert any(f["check"] == "port" and "2 machines met" in f["saw"] for f in r0["findings"])
    assert r0["timings_s"]["launch checks"] < 15 and r1["timings_s"]["launch checks"] < 15


def test_two_machines_with_different_builds(tmp_path):
    port = free_port()
    build0 = compile_build(tmp_path / "m0", two_machines(port))
    build1 = compile_build(tmp_path / "m1", two_machines(port), {"training": {"learning_rate": 0.5}})
    (rc0, r0, _), (rc1, r1, _) = _two(tmp_path, build0, build1)
    assert (rc0, rc1) == (1, 1)
    for r in (r0, r1):  # both machines stop, and say why
        _fault(r, "same-build", "machine 1")


def test_two_machines_script_missing_on_machine_1(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT_BODY)
    other = tmp_path / "elsewhere"
    other.mkdir()
    build = compile_build(tmp_path, two_machines(free_port()))
    (rc0, r0, _), (rc1, r1, _) = _two(tmp_path, build, build, "train.py", cwd1=other)
    assert (rc0, rc1) == (1, 1)
    for r in (r0, r1):
        _fault(r, "script", "machine 1")


def test_two_machines_with_different_versions(tmp_path):
    fake = tmp_path / "fake-site" / "deepspeed-0.1.0.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: deepspeed\nVersion: 0.1.0\n")
    build = compile_build(tmp_path, two_machines(free_port()))
    path = f"{fake.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    (rc0, r0, _), (rc1, r1, _) = _two(tmp_path, build, build, env1={"PYTHONPATH": path})
    assert (rc0, rc1) == (1, 1)
    f = [x for x in faults(r0)["versions"] if "machine 0:" in x["saw"]]
    assert f and "deepspeed 0.1.0" in f[0]["saw"] and f[0]["where"] == "machine 1"


def test_two_machines_build_missing_on_machine_1(tmp_path):
    build = compile_build(tmp_path, two_machines(free_port()))
    (rc0, r0, _), (rc1, r1, _) = _two(tmp_path, build, tmp_path / "not-copied")
    assert (rc0, rc1) == (1, 1)
    _fault(r1, "build", "machine 1")
    _fault(r0, "port", "machine 1")  # machine 0 names the machine that never came


def test_bad_input_exit_2(tmp_path, build):
    p = harness.tuner('check', '--skip', 'no-such-check', str(build), cwd=tmp_path)
    assert p.returncode == 2 and "unknown check" in p.stderr and "Traceback" not in p.stderr


def test_skip_turns_a_check_off(tmp_path, build):
    rc, report, _ = check("--launch-only", "--skip", "script", str(build), "no_such_train.py", cwd=tmp_path)
    assert rc == 0, report["faults"]
    assert any(f["check"] == "script" and f["status"] == "skipped" for f in report["findings"])


def test_launch_and_run_with_check_stop_at_a_fault(tmp_path, build):
    """`tuner launch --check` / `tuner run --check`: a fault stops the command before any rank
    starts (the script never runs); the report goes to stderr."""
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"platform": "cpu", "host_memory_bytes": 4 << 20, "host_available_bytes": 2 << 20,
                                 "hostname": socket.gethostname()}))
    (tmp_path / "train.py").write_text("open('ran', 'w').close()\n")
    low = {**os.environ, "TUNER_HARDWARE_FACTS": str(facts)}
    for cmd in (["launch", "--check", str(build), "train.py"], ["run", "--check", str(build)]):
        p = subprocess.run([sys.executable, "-m", "tuner", *cmd], cwd=tmp_path, capture_output=True, text=True,
                           env=low, timeout=120)
        assert p.returncode == 1, (cmd, p.stderr[-2000:])
        assert "FAULT host-ram" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "ran").exists()
    assert not (tmp_path / "output" / "metrics.jsonl").exists()


def test_machines_probing_one_missing_output_folder_at_once_all_find_it_writable(tmp_path):
    """Machines that share an output folder (a network file system; two launchers on one host
    in these tests) probe it at the same moment. Each probe is its own uniquely named entry:
    no machine's probe removes the folder another one is writing into, and none is left."""
    from concurrent.futures import ThreadPoolExecutor

    from tuner.runtime.check.preflight import _writable

    out = tmp_path / "output"
    with ThreadPoolExecutor(8) as pool:
        problems = [p for p in pool.map(lambda _: _writable(out), range(4000)) if p]
    assert not problems, problems[:3]
    assert list(tmp_path.iterdir()) == []
