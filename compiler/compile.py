"""The compile: settings.toml -> accelerate YAML + DeepSpeed JSON + manifest, the top stage.

Pure Python; never imports torch, accelerate, deepspeed or textual. Read -> compile -> write:

    read:    gather (gather.py): the settings, normalised once (normalise.py: aliases,
             spellings, schema; frozen), the files they name, hardware facts, the model's
             facts, the NVMe directory's free space, package versions -> CompileInputs
    compile: compile_inputs (no I/O), each stage entered once, top-down:
             rules (rules.py: cross-field checks, the DeepSpeed config (deepspeed_config.py),
             then the plan, once; settings and plan frozen) -> review/model_facts.py (wrap
             classes, the memory estimate) -> known_faults.py -> emit.files (every text)
    write:   CompileResult.write (build_writer.write_atomically): the one writer

`compile_text` / `compile_file` gather and compile; nothing is written until `write()` is
called on a result without errors. A library caller may state the target machine
(`compile_file(path, facts=HardwareFacts(...))`) or build `CompileInputs` itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .artefacts import build_writer, cluster, emit
from .canonical.normalise import Normalised, normalise
from .diagnostics import Diagnostic, Diagnostics
from .gather import CompileInputs, gather
from .keys import paths as K
from .keys.settings import Settings
from .memory.report import Estimate
from .parse import FileError, parse_yaml
from .plan.plan import Plan
from .plan.rules import check
from .read.files import MAX_BYTES
from .read.hardware import HardwareFacts
from .read.source import Source, SourceError, parse_settings_text, read_settings
from .review import known_faults, model_facts


@dataclass
class CompileResult:
    diagnostics: Diagnostics
    settings: Settings | None = None
    plan: Plan | None = None
    out_dir: Path | None = None
    files: dict[str, str] = field(default_factory=dict)
    """Artefact name -> exact text that `write()` puts on disk."""
    estimate: Estimate | None = None
    """The memory estimate this compile computed (its fit warnings come from it); what
    `tuner estimate` and the wizard show. None when the settings got no plan."""
    deepspeed: Mapping[str, Any] | None = None
    """The DeepSpeed config the rules made (what deepspeed.json holds); None: not DeepSpeed."""
    normalised: Normalised | None = None
    """The settings as normalised, before the rules resolved anything (what the wizard shows
    in its fields); None when the text did not parse."""

    @property
    def ok(self) -> bool:
        return self.diagnostics.ok and bool(self.files)

    @property
    def accelerate_yaml(self) -> str:
        return self.files.get(emit.ACCELERATE_YAML, "")

    @property
    def deepspeed_json(self) -> str:
        return self.files.get(emit.DEEPSPEED_JSON, "")

    @property
    def manifest(self) -> dict[str, Any]:
        return json.loads(self.files[emit.MANIFEST_JSON]) if emit.MANIFEST_JSON in self.files else {}

    def write(self) -> Path:
        """Write the artefacts (only when there are no errors); returns the directory."""
        if not self.ok or self.out_dir is None:
            raise RuntimeError("refusing to write artefacts of a compile with errors")
        # Artefacts of the previous build that this one no longer has (a DDP build replacing a
        # DeepSpeed one, a single-machine build replacing a Slurm one) go, when tuner wrote them.
        stale = tuple(n for n in (emit.DEEPSPEED_JSON, *cluster.ALL) if n not in self.files)
        build_writer.write_atomically(self.out_dir, self.files, remove=stale)
        return self.out_dir


def default_out_dir(settings_file: Path) -> Path:
    return settings_file.parent / "build"


def compile_source(src: Source, overrides: list[str] | tuple[str, ...] = (), out_dir: Path | None = None,
                   display_name: str | None = None, facts: HardwareFacts | None = None,
                   host_facts: bool = True) -> CompileResult:
    """Gather the inputs of parsed settings and compile them (`gather.gather` says what
    `facts` and `host_facts` mean)."""
    return compile_inputs(gather(src, overrides, out_dir, facts, display_name, host_facts))


def compile_inputs(inputs: CompileInputs) -> CompileResult:
    """The compile itself: `inputs` -> artefact texts and diagnostics. Reads no file, no
    environment variable, no clock: the same inputs give the same result, wherever it runs."""
    src = inputs.source
    origin: dict[str, str] = {}  # canonical key -> key as written; filled by normalise

    def locate(key: str) -> tuple[int | None, int | None]:
        parts = key.split(".")
        for i in range(len(parts), 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in origin:
                return src.locator.find(".".join([origin[prefix], *parts[i:]]))
        return src.locator.find(key)

    diags = Diagnostics(file=inputs.display_name, locate=locate)
    n = inputs.normalised
    if n is None:  # inputs built by hand: normalise here, from what they gathered
        n = normalise(src.data, diags, inputs.overrides, inputs.read)
    else:
        diags.extend(inputs.normalise_diagnostics)
    origin.update(n.origin)
    model = n.settings["model"]
    found = inputs.model(model["path"], model["family"], model["flavour"])
    checked = check(n, diags, inputs.platform, found, inputs.disk, model_facts.nvme_bytes)
    s, plan = checked.settings, checked.plan
    out_dir = inputs.out_dir
    result = CompileResult(diags, s, plan, out_dir, normalised=n)

    base_cfg: dict[str, Any] = {}
    if s.accelerate.base:
        base_cfg = _load_base(inputs, s.accelerate.base, diags)

    result.deepspeed = checked.deepspeed
    result.estimate = model_facts.check(s, plan, diags, found, inputs.facts, checked.deepspeed)
    known_faults.check(s, plan, diags, inputs.versions, result.estimate)
    for text, exists in sorted(inputs.data_paths.items()):
        if not exists:  # CI may compile where the data is not: a warning; `tuner run` refuses
            key = K.DATA_VALIDATION_PATH if text == s.data.validation_path else K.DATA_PATH
            diags.warning(key, f"data path {text!r} does not exist on this machine (relative paths start at "
                          f"{inputs.project_dir})", "fix the path, or make sure it exists where tuner run runs")

    if not diags.ok:
        return result

    ds_path = _deepspeed_path(out_dir, inputs.project_dir) if checked.deepspeed is not None else None
    files = emit.files(s, plan, checked.deepspeed, ds_path, base_cfg, out_dir,
                       K.HARDWARE_MAIN_PROCESS_PORT in n.explicit, inputs.settings_file, src.text, inputs.versions,
                       diags)
    if files is None:
        return result
    for name, text in files.items():  # what tuner run reads back (runtime/artefacts.py) has this cap
        if len(text.encode("utf-8")) > MAX_BYTES:
            diags.error("", f"{name} would be {len(text.encode('utf-8')):,} bytes, over the {MAX_BYTES:,} bytes "
                        "tuner run reads", "make the inline deepspeed.config or accelerate settings smaller")
    if not diags.ok:
        return result
    result.settings, result.files = s, files
    return result


def _deepspeed_path(out_dir: Path, base_dir: Path) -> str:
    """deepspeed.json as accelerate.yaml names it: relative to the project directory (where the
    settings file is, and where `accelerate launch --config_file build/accelerate.yaml` and tuner
    run start), so the build works wherever the project is copied. A build written outside the
    project cannot travel with it; it names the file by absolute path."""
    path = out_dir / emit.DEEPSPEED_JSON
    return str(path.relative_to(base_dir)) if path.is_relative_to(base_dir) else str(path)


def _load_base(inputs: CompileInputs, text: str, diags: Diagnostics) -> dict[str, Any]:
    got = inputs.read(text, "base accelerate config")
    path = got.path
    try:
        loaded = parse_yaml(got.text(), str(path))
    except FileError as exc:
        diags.error(K.ACCELERATE_BASE, exc.message,
                    "fix the path, or remove accelerate.base to write a fresh config" if exc.missing else "")
        return {}
    if not isinstance(loaded, dict):
        diags.error(K.ACCELERATE_BASE, f"base accelerate config {path} is not a YAML mapping")
        return {}
    env = str(loaded.get("compute_environment", "LOCAL_MACHINE"))
    if env != "LOCAL_MACHINE":
        diags.error(K.ACCELERATE_BASE, f"{path} is a {env} config; tuner writes launch configs for local "
                    "machines (LOCAL_MACHINE), so it cannot merge into it",
                    f"remove accelerate.base, or import it instead: tuner import {path}")
        return {}
    if not _base_keys_ok(loaded, path, diags):
        return {}
    diags.note(K.ACCELERATE_BASE, f"merging into {path}; its other keys are kept")
    return loaded


def _base_keys_ok(loaded: dict[Any, Any], path: Path, diags: Diagnostics) -> bool:
    """The base's keys are copied into accelerate.yaml: refuse what accelerate's loader
    would refuse there (unknown top-level keys, a block that is not a mapping)."""
    unknown = sorted(str(k) for k in loaded if not isinstance(k, str) or k not in emit.ACCELERATE_CONFIG_KEYS)
    if unknown:
        named = ", ".join(unknown[:20]) + (f" and {len(unknown) - 20:,} more" if len(unknown) > 20 else "")
        diags.error(K.ACCELERATE_BASE, f"{path} has keys accelerate's config loader refuses: {named}",
                    "remove them from the base config (or upgrade accelerate if they are new)")
    blocks = sorted(k for k in emit.ACCELERATE_CONFIG_BLOCKS if loaded.get(k) is not None and not isinstance(loaded[k], dict))
    if blocks:
        diags.error(K.ACCELERATE_BASE, f"{path}: {', '.join(blocks)} must be a mapping of keys",
                    "fix or remove it in the base config")
    return not unknown and not blocks


def compile_text(text: str, overrides: list[str] | tuple[str, ...] = (), path: Path | None = None,
                 out_dir: Path | None = None, facts: HardwareFacts | None = None,
                 host_facts: bool = True) -> CompileResult:
    """Compile settings given as TOML text (the wizard uses this on every change). `facts`
    describe the target machine (default: this host's injected or saved facts, unless
    `host_facts` is False)."""
    try:
        src = parse_settings_text(text, path)
    except SourceError as exc:
        diags = Diagnostics(file=str(path) if path else "<settings>")
        diags.items.append(Diagnostic("error", "", exc.message, "fix the TOML syntax at this position",
                                      diags.file, exc.line, exc.column))
        return CompileResult(diags)
    return compile_source(src, overrides, out_dir, facts=facts, host_facts=host_facts)


def compile_file(path: Path, overrides: list[str] | tuple[str, ...] = (), out_dir: Path | None = None,
                 facts: HardwareFacts | None = None) -> CompileResult:
    """Compile a settings file. Raises SourceError (with .io set) when it cannot be read.
    `facts` describe the target machine (default: this host's injected or saved facts)."""
    src = read_settings(Path(path))
    return compile_source(src, overrides, out_dir, facts=facts)

