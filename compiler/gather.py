"""Everything a compile reads, gathered once at the edge: `CompileInputs` and `gather`.

The compiler is read -> compile -> write. `gather` does all the reading: the settings file,
the DeepSpeed JSON and base accelerate YAML the settings name, the hardware facts (the ones a
caller passes, else `$TUNER_HARDWARE_FACTS` or what `tuner doctor` saved on this host), the
platform that ``hardware.platform = "auto"`` means here, what the model is (block-detection
cache, built-in registry, its ``config.json``), the NVMe swap directory's free space, the
installed packages' versions, and the project directory (the settings file's, else the
working directory: the one place the working directory counts). `tuner.compiler.compile.
compile_inputs` then compiles that value without touching the file system, the environment
or the network, so the same `CompileInputs` always compile to the same result.

What the settings name is known only once they are normalised (aliases, overrides, a raw
DeepSpeed config's own NVMe paths), so `gather` runs the normalise stage, once, reading
the DeepSpeed config it names as it goes; the compile starts from that frozen result
(`CompileInputs.normalised`) and never normalises again.

Paths are keyed as the settings write them; relative ones are resolved here, against the
project directory, never in the compile.
"""

from __future__ import annotations

import copy
import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .canonical.normalise import Normalised, normalise
from .diagnostics import Diagnostic, Diagnostics
from .parse import FileError
from .read.files import FileRead, read_file, resolve
from .read.hardware import HardwareFacts, local_facts
from .read.inputs import DiskFacts, ModelFacts, detected_platform, find_model, measure_disk, model_key, tool_versions
from .read.source import Source


@dataclass(frozen=True)
class CompileInputs:
    """Every input of one compile. Build it with `gather` (or by hand, as a library caller
    stating the target machine); `tuner.compiler.compile.compile_inputs` compiles it without I/O."""

    source: Source
    overrides: tuple[str, ...] = ()
    project_dir: Path = Path("/")
    """Where relative paths in the settings start (the settings file's directory)."""
    out_dir: Path = Path("/build")
    """The build directory, absolute."""
    settings_file: str | None = None
    """The settings file relative to the build directory (what the manifest records)."""
    display_name: str = "<settings>"
    platform: str = "cpu"
    """What ``hardware.platform = "auto"`` means: the machine the facts describe."""
    facts: HardwareFacts | None = None
    files: dict[tuple[str, str], FileRead] = field(default_factory=dict)
    """(what, path as written) -> the file: DeepSpeed JSON, base accelerate YAML."""
    models: dict[tuple[str, str, str], ModelFacts] = field(default_factory=dict)
    """(model.path as written, family, flavour) -> what is known about the model."""
    disks: dict[str, DiskFacts] = field(default_factory=dict)
    """NVMe path as written -> the directory's state."""
    versions: dict[str, str] = field(default_factory=dict)
    """Installed package versions (the manifest's ``versions``)."""
    data_paths: dict[str, bool] = field(default_factory=dict)
    """Data path as written (data.path, data.files, data.validation_path) -> whether it exists here."""
    normalised: Normalised | None = None
    """The settings normalised (by `gather`); None: the compile normalises `source` itself."""
    normalise_diagnostics: tuple[Diagnostic, ...] = ()
    """What normalising them said (located in the settings file), reported by the compile."""

    def read(self, text: str, what: str) -> FileRead:
        got = self.files.get((what, text))
        if got is None:  # not gathered: a bug in gather; say so instead of reading
            return FileRead(Path(text), error=FileError(f"{what} {text} was not gathered before the compile"))
        return got

    def model(self, path: str, family: str, flavour: str) -> ModelFacts:
        return self.models.get(model_key(path, family, flavour)) or ModelFacts(location=str(path))

    def disk(self, text: str) -> DiskFacts | None:
        return self.disks.get(text)


def gather(src: Source, overrides: list[str] | tuple[str, ...] = (), out_dir: Path | None = None,
           facts: HardwareFacts | None = None, display_name: str | None = None,
           host_facts: bool = True) -> CompileInputs:
    """Read everything the compile of `src` needs, and normalise the settings (once). `facts`
    describe the target machine; when None, the injected or saved facts of this host are used
    (`hardware.local_facts`), unless `host_facts` is False (the wizard: the run usually
    targets other machines, so only what the settings state counts)."""
    project_dir = src.path.parent.resolve() if src.path else Path.cwd()
    out = Path(out_dir) if out_dir else (src.path.parent / "build" if src.path else Path("build"))
    try:
        out = out.resolve()
    except RuntimeError:  # Python 3.11's pathlib reports a symlink loop so, not as an OSError
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(out)) from None
    stated = facts is not None
    facts = copy.deepcopy(facts) if stated else (local_facts() if host_facts else None)
    display = display_name or (str(src.path) if src.path else "<settings>")

    files: dict[tuple[str, str], FileRead] = {}

    def read(text: str, what: str) -> FileRead:
        if (what, text) not in files:
            files[(what, text)] = read_file(text, project_dir, what)
        return files[(what, text)]

    said = Diagnostics(file=display, locate=src.locator.find)
    n = normalise(src.data, said, tuple(overrides), read)
    model, acc, ds = n.settings["model"], n.settings["accelerate"], n.settings["deepspeed"]
    base = acc.get("base")
    if isinstance(base, str) and base:
        read(base, "base accelerate config")
    models = {}
    if isinstance(model.get("path"), str):
        key = model_key(model["path"], model.get("family", ""), model.get("flavour", ""))
        try:
            models[key] = find_model(*key, project_dir)
        except (OSError, ValueError):  # an unreadable directory on the way: the model is not available here
            models[key] = ModelFacts(location=key[0])
    disks = {text: measure_disk(text, project_dir) for text in _nvme_paths(ds)}
    data_paths = {text: resolve(text, project_dir).exists() for text in _data_paths(n.settings["data"])}
    return CompileInputs(
        source=src, overrides=tuple(overrides), project_dir=project_dir, out_dir=out,
        settings_file=os.path.relpath(src.path.resolve(), out) if src.path else None,
        display_name=display, platform=detected_platform(facts, stated), facts=facts, files=files,
        models=models, disks=disks, versions=tool_versions(), data_paths=data_paths, normalised=n,
        normalise_diagnostics=tuple(said.items))


def _data_paths(data: Mapping[str, Any]) -> set[str]:
    """The local data paths the settings name (not globs, not 'builtin')."""
    files = data.get("files")
    named = [data.get("path"), data.get("validation_path"), *(files if isinstance(files, list) else [])]
    return {p for p in named if isinstance(p, str) and p and p != "builtin" and not any(c in p for c in "*?[")}


def _nvme_paths(ds: Mapping[str, Any]) -> set[str]:
    """Every NVMe swap directory the settings or their raw DeepSpeed config name."""
    found = {ds.get("nvme_path")}
    raw = ds.get("config")
    zero = raw.get("zero_optimization") if isinstance(raw, dict) else None
    if isinstance(zero, dict):
        for which in ("offload_optimizer", "offload_param"):
            block = zero.get(which)
            if isinstance(block, dict) and block.get("nvme_path"):
                found.add(str(block["nvme_path"]))
    return {p for p in found if isinstance(p, str) and p}
