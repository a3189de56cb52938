"""Everything a compile reads, gathered once at the edge: `CompileInputs` and `gather`.

The compiler is read -> compile -> write. `gather` does all the reading: the settings file,
the DeepSpeed JSON and base accelerate YAML the settings name, the hardware facts (the ones a
caller passes, else `$TUNER_HARDWARE_FACTS` or what `tuner doctor` saved on this host), the
platform that ``hardware.platform = "auto"`` means here, what the model is (block-detection
cache, built-in registry, its ``config.json``), the NVMe swap directory's free space, the
installed packages' versions, and the project directory (the settings file's, else the
working directory: the one place the working directory counts). `tuner.compiler.
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
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..diagnostics import Diagnostic, Diagnostics
from .files import FileError, FileRead, read_file, resolve
from .hardware import HardwareFacts
from .source import Source

if TYPE_CHECKING:
    from ..canonical.normalise import Normalised


@dataclass(frozen=True)
class DiskFacts:
    """The NVMe swap directory as it is now (checked against what offload will put there)."""

    path: Path
    is_dir: bool = False
    writable: bool = False
    free_bytes: int = 0
    elsewhere: str = ""
    """Set by the rules stage when this machine is not a training machine (the target platform
    the settings state is not this one's): why a missing directory here is not an error."""


@dataclass(frozen=True)
class ModelFacts:
    """What can be known about a model without building it."""

    location: str
    """A built-in's name, else the absolute path (the block-detection cache's key)."""
    exists: bool = False
    packaged: str | None = None
    """The folder of a packaged built-in (``builtin:all-minilm-l6-v2``)."""
    detection: Any = None
    """`block_cache.DetectionResult` from `tuner blocks`, when one is cached and fresh."""
    config_file: str | None = None
    config: FileRead | None = None
    """The model's ``config.json`` (for the analytic parameter count)."""
    near: tuple[str, ...] = ()
    """For a local path that is not there: the closest names of folders beside it (a typo's fix)."""


def model_key(path: str, family: str, flavour: str) -> tuple[str, str, str]:
    return (str(path), str(family), str(flavour or ""))


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


# --- the reading ----------------------------------------------------------------------------


def measure_disk(text: str, base_dir: Path) -> DiskFacts:
    path = Path(os.path.normpath(resolve(text, base_dir)))
    try:
        if not path.is_dir():
            return DiskFacts(path)
        if not os.access(path, os.W_OK | os.X_OK):
            return DiskFacts(path, True)
        return DiskFacts(path, True, True, shutil.disk_usage(path).free)
    except (OSError, ValueError):  # cannot even look: reported as not a usable directory
        return DiskFacts(path)


def find_model(path: str, family: str, flavour: str, base_dir: Path | None) -> ModelFacts:
    """What the block-detection cache, the built-in registry and the model's own
    ``config.json`` say about it; reads files, never builds the model."""
    from . import block_cache
    from . import builtin_models as tiny_configs

    packaged = tiny_configs.packaged_dir(path)
    builtin = tiny_configs.is_builtin(path)
    location = path if builtin else str(resolve(path, base_dir or Path.cwd()))
    detection = block_cache.find(location, family, flavour)
    local = packaged or (None if builtin else Path(location))
    cfg_file = block_cache.model_config_file(packaged or location, flavour) if (packaged or not builtin) else None
    exists = local is not None and Path(local).exists()
    return ModelFacts(location=location, exists=exists, near=() if exists or builtin else _near(Path(location)),
                      packaged=str(packaged) if packaged is not None else None, detection=detection,
                      config_file=str(cfg_file) if cfg_file is not None else None,
                      config=read_file(str(cfg_file), None, "model config") if cfg_file is not None else None)


def _near(path: Path) -> tuple[str, ...]:
    """Folders beside a missing `path` whose names are close to its own (at most 3)."""
    import difflib
    from itertools import islice

    try:
        names = [p.name for p in islice(path.parent.iterdir(), 5000) if p.is_dir()]
    except OSError:
        return ()
    return tuple(difflib.get_close_matches(path.name, names, n=3, cutoff=0.75))


def detected_platform(facts: HardwareFacts | None, stated: bool) -> str:
    """The facts' platform when a caller stated them; else what this machine is
    (``$TUNER_PLATFORM``, this host's facts, its device files)."""
    if stated and facts is not None and facts.platform in ("cuda", "rocm", "mps", "cpu"):
        return facts.platform
    from .hardware import local_facts
    from .platform_probe import detect_platform

    return detect_platform(facts if facts is not None else local_facts())


def tool_versions() -> dict[str, str]:
    """Versions from package metadata (the manifest's ``versions``): no heavy import happens here."""
    return dict(_tool_versions())


@lru_cache(maxsize=1)  # reading package metadata was half of a compile's time (the wizard compiles on every edit)
def _tool_versions() -> dict[str, str]:
    out = {"python": ".".join(map(str, sys.version_info[:3]))}
    for dist in ("tuner", "torch", "accelerate", "deepspeed", "transformers", "diffusers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def gather(src: Source, overrides: list[str] | tuple[str, ...] = (), out_dir: Path | None = None,
           facts: HardwareFacts | None = None, display_name: str | None = None,
           host_facts: bool = True) -> CompileInputs:
    """Read everything the compile of `src` needs, and normalise the settings (once). `facts`
    describe the target machine; when None, the injected or saved facts of this host are used
    (`hardware.local_facts`), unless `host_facts` is False (the wizard: the run usually
    targets other machines, so only what the settings state counts)."""
    from ..canonical.normalise import normalise
    from .hardware import local_facts

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
