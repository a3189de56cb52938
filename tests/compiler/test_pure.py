"""Read -> compile -> write: the compile reads nothing, so where it runs does not matter.

* the same settings compile to the same artefacts and diagnostics from any working directory
  (relative model, NVMe, DeepSpeed JSON and base YAML paths start at the settings file);
* `compile_inputs` does no I/O: run in a subprocess under an audit hook and with the file
  system, environment and hostname calls patched to record (and raise), it records nothing,
  while the same instrumentation records the reads of `gather`; a wizard edit (which
  re-compiles the text) reads only inside its gather stage;
* a library caller states the target machine (`facts=`) and gets that machine's artefacts;
* `tuner estimate` and the wizard show the estimate the compile computed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tuner.commands.cli import main
from tuner.compiler.compile import compile_file, compile_inputs, compile_text
from tuner.compiler.gather import gather
from tuner.compiler.read.hardware import FACTS_ENV, GpuInfo, HardwareFacts
from tuner.compiler.read.source import read_settings

GIB = 1024**3
REPO = Path(__file__).resolve().parents[2]
SMALL_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
               "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 4, "vocab_size": 128, "tie_word_embeddings": False}
#: 8 x 80 GiB CUDA GPUs: a training node this CPU-only machine compiles for.
CUDA_NODE = HardwareFacts(platform="cuda", gpus=[GpuInfo(i, "H100", 80 * GIB, "9.0", True) for i in range(8)],
                          host_memory_bytes=1024 * GIB, source="stated")


def project(root: Path) -> Path:
    """A project whose settings name every kind of file by a relative path: the model
    (config.json only), the NVMe swap directory, a DeepSpeed JSON and a base accelerate YAML."""
    proj = root / "proj"
    (proj / "models" / "small").mkdir(parents=True)
    (proj / "models" / "small" / "config.json").write_text(json.dumps(SMALL_LLAMA))
    (proj / "swap").mkdir()
    (proj / "ds.json").write_text('{"gradient_clipping": 1.0, "zero_optimization": {"stage": 3}}\n')
    (proj / "base.yaml").write_text("compute_environment: LOCAL_MACHINE\ndebug: false\n")
    path = proj / "settings.toml"
    path.write_text('[model]\npath = "models/small"\n[hardware]\nplatform = "auto"\nnum_processes = 8\n'
                    '[accelerate]\nbase = "base.yaml"\n'
                    '[deepspeed]\nenabled = true\nconfig = "ds.json"\noffload_param = "nvme"\n'
                    'offload_optimizer = "nvme"\nnvme_path = "swap"\n[training]\nmixed_precision = "bf16"\n')
    return path


def test_the_same_settings_compile_the_same_from_any_working_directory(tmp_path, monkeypatch):
    path = project(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    seen = []
    for cwd in (path.parent, tmp_path, elsewhere):
        monkeypatch.chdir(cwd)
        result = compile_file(path, facts=CUDA_NODE)
        assert result.ok, [d.format() for d in result.diagnostics.errors]
        # the relative paths were found, not merely left unchecked
        assert result.estimate.model.source == "config.json"
        assert "nvme_path" in result.deepspeed_json and "not checked" not in str(result.diagnostics.items)
        assert any("merging into" in d.message for d in result.diagnostics.items)
        seen.append((result.files, [d.format() for d in result.diagnostics.items]))
    assert seen[0] == seen[1] == seen[2]


def test_a_relative_nvme_path_is_checked_in_the_project_not_the_working_directory(tmp_path, monkeypatch):
    path = project(tmp_path)
    monkeypatch.chdir(tmp_path)  # has no swap/ directory
    (path.parent / "swap").rmdir()
    errors = {d.message for d in compile_file(path, facts=CUDA_NODE).diagnostics.errors}
    assert errors == {f"NVMe offload path {path.parent / 'swap'} does not exist or is not a directory"}


#: Run in a fresh interpreter so the audit hook (which cannot be removed) stays there.
AUDIT = textwrap.dedent('''
    import importlib, json, os, pkgutil, socket, sys
    from collections.abc import Mapping
    from pathlib import Path

    import tuner.compiler as C
    for m in pkgutil.walk_packages(C.__path__, "tuner.compiler."):
        if not m.name.endswith(".verify"):  # the --verify subprocess (imports accelerate)
            importlib.import_module(m.name)
    import yaml  # noqa: F401 - the YAML parser, imported lazily by files.parse_yaml
    from tuner.compiler.compile import compile_inputs, compile_text
    from tuner.compiler.gather import gather
    from tuner.compiler.read.hardware import GpuInfo, HardwareFacts
    from tuner.compiler.read.source import read_settings

    compile_text('[model]\\npath = "builtin:tiny-llama"\\n')  # package data (schema, rules) loaded once

    seen, in_gather, mode = [], [], {"armed": False, "raise": False, "gathering": 0}

    class Forbidden(RuntimeError):
        pass

    def record(item):  # what the gather stage does is its business; everything else is recorded
        (in_gather if mode["gathering"] else seen).append(item)
        if mode["raise"] and not mode["gathering"]:
            raise Forbidden(item)

    def hook(event, args):
        if mode["armed"] and event in ("open", "import", "os.listdir", "os.scandir", "os.chdir",
                                       "socket.gethostname", "subprocess.Popen", "os.system", "os.putenv"):
            (in_gather if mode["gathering"] else seen).append(event + " " + repr(args[:1])[:120])

    sys.addaudithook(hook)

    def watch(owner, name):
        real = getattr(owner, name)
        def wrapper(*a, **k):
            if mode["armed"]:
                record(f"{name} {a[:1]!r}"[:120])
            return real(*a, **k)
        setattr(owner, name, wrapper)

    for name in ("stat", "lstat", "statvfs", "access", "getcwd", "listdir", "scandir"):
        watch(os, name)
    watch(socket, "gethostname")
    real_env = os.environ

    class Env(Mapping):  # os.environ while armed: every read is recorded
        def __getitem__(self, key):
            record(f"environ {key!r}")
            return real_env[key]
        def __iter__(self):
            record("environ iter")
            return iter(real_env)
        def __len__(self):
            return len(real_env)

    facts = HardwareFacts(platform="cuda", gpus=[GpuInfo(i, "H100", 80 * 1024**3, "9.0", True) for i in range(8)],
                          host_memory_bytes=1024 * 1024**3, source="stated")
    src = read_settings(Path(sys.argv[1]))

    os.environ, mode["armed"] = Env(), True
    inputs = gather(src, facts=facts)
    mode["armed"], os.environ = False, real_env
    gathered, seen[:] = list(seen), []

    plain = compile_inputs(inputs)
    os.environ, mode["armed"], mode["raise"] = Env(), True, True
    try:
        result = compile_inputs(inputs)
    finally:
        mode["armed"], os.environ = False, real_env
    compiled = list(seen)

    # The wizard's edit path: an edit re-compiles the text; only its gather stage may read.
    from tuner.tui.model import WizardState

    import tuner.compiler.compile as driver

    real_gather = driver.gather
    def gathering(*a, **k):
        mode["gathering"] += 1
        try:
            return real_gather(*a, **k)
        finally:
            mode["gathering"] -= 1
    driver.gather = gathering  # compile_source's gather
    state = WizardState(Path(sys.argv[1]), Path(sys.argv[1]).read_text())
    state.set("training.micro_batch_size", 3)  # the first edit imports what editing needs
    seen[:], in_gather[:] = [], []
    os.environ, mode["armed"], mode["raise"] = Env(), True, True
    try:
        state.set("training.micro_batch_size", 2)
    finally:
        mode["armed"], mode["raise"], os.environ = False, False, real_env
    print(json.dumps({"gathered": gathered, "compile": compiled, "ok": result.ok, "files": sorted(result.files),
                      "same": result.files == plain.files and
                              [d.format() for d in result.diagnostics.items] ==
                              [d.format() for d in plain.diagnostics.items],
                      "edit": seen, "edit_gathered": in_gather, "edit_ok": state.result.ok,
                      "edited": state.value("training.micro_batch_size")}))
''')


def test_compile_inputs_does_no_io(tmp_path):
    path = project(tmp_path)
    out = subprocess.run([sys.executable, "-c", AUDIT, str(path)], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    # The instrumentation sees I/O: gather's reads of the settings' files and the disk.
    assert any(e.startswith("open") and "ds.json" in e for e in report["gathered"]), report["gathered"]
    assert any(e.startswith("open") and "config.json" in e for e in report["gathered"])
    assert any(e.startswith(("stat", "statvfs")) for e in report["gathered"])
    # ... and none in the compile, which still produced every artefact.
    assert report["compile"] == []
    assert report["ok"] and "deepspeed.json" in report["files"] and report["same"]
    # The wizard's edit path reads only in its gather stage (which does read the DeepSpeed JSON).
    assert report["edit"] == [] and report["edit_ok"] and report["edited"] == 2
    assert any(e.startswith("open") and "ds.json" in e for e in report["edit_gathered"]), report["edit_gathered"]


def test_stated_hardware_facts_give_that_machines_artefacts(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_PLATFORM", "cpu")  # this machine, as the environment says it
    example = REPO / "examples" / "ddp.toml"     # hardware.platform = "auto" (the default)
    here = compile_file(example)
    cuda = compile_file(example, facts=CUDA_NODE)
    stated = compile_file(example, ["hardware.platform=cuda"], facts=CUDA_NODE)
    assert here.plan.platform == "cpu" and cuda.plan.platform == "cuda"
    assert cuda.accelerate_yaml == stated.accelerate_yaml != here.accelerate_yaml
    assert "use_cpu: true" in here.accelerate_yaml and "use_cpu: false" in cuda.accelerate_yaml
    assert cuda.manifest["topology"]["platform"] == "cuda"
    # the estimate counts the stated GPUs, not this machine
    assert cuda.estimate.gpu_capacity == 80 * GIB and "hardware facts (stated)" in cuda.estimate.capacity_source


def test_cli_estimate_prints_the_estimate_the_compile_carries(tmp_path, monkeypatch, capsys):
    path = project(tmp_path)
    facts_file = tmp_path / "facts.json"
    facts_file.write_text(CUDA_NODE.to_json())
    monkeypatch.setenv(FACTS_ENV, str(facts_file))
    result = compile_file(path)
    assert result.estimate is not None and result.estimate.gpu_capacity == 80 * GIB
    assert main(["estimate", str(path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    want = {**result.estimate.to_dict(), "strategy": result.plan.strategy, "errors": []}
    assert printed == json.loads(json.dumps(want, sort_keys=True))
    assert main(["estimate", str(path)]) == 0
    assert capsys.readouterr().out == result.estimate.table() + "\n"


def test_the_wizards_estimate_is_its_compiles(tmp_path, monkeypatch):
    from tuner.tui import services
    from tuner.tui.estimate_view import compact_table

    path = project(tmp_path)
    text = path.read_text().replace('platform = "auto"', 'platform = "cuda"\ngpu_memory_gib = 40')
    result = compile_text(text, path=path, host_facts=False)
    assert services.target_estimate(text, path).to_dict() == result.estimate.to_dict()
    assert services.estimate_table(text, path) == compact_table(result.estimate)


@pytest.mark.parametrize("name", ["zero3_nvme", "fsdp2", "ddp"])
def test_gather_then_compile_is_compile_file(name):
    example = REPO / "examples" / f"{name}.toml"
    a = compile_file(example, facts=CUDA_NODE)
    b = compile_inputs(gather(read_settings(example), facts=CUDA_NODE))
    assert a.files == b.files and a.diagnostics.items == b.diagnostics.items
