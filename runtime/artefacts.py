"""The compiled artefacts a run reads: manifest.json, accelerate.yaml, deepspeed.json.

The runtime never reads settings.toml: everything comes from the build directory. This
module has no torch import, so `tuner run` can report a bad build directory at once.
"""

from __future__ import annotations

import hashlib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..compiler.artefacts.emit import ACCELERATE_YAML, DEEPSPEED_JSON, MANIFEST_VERSION
from ..compiler.artefacts.emit import MANIFEST_JSON as MANIFEST
from ..compiler.diagnostics import EXIT_USAGE
from ..compiler.keys.settings import Settings
from ..compiler.plan.plan import Plan
from ..compiler.plan.strategy import Strategy


class RunError(Exception):
    """A problem the user can fix; printed as one message, exit status non-zero, no traceback."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


@dataclass(frozen=True)
class Artefacts:
    build_dir: Path
    manifest: dict[str, Any]
    settings: Settings
    plan: Plan

    @property
    def accelerate_yaml(self) -> Path:
        return self.build_dir / ACCELERATE_YAML

    @property
    def deepspeed_json(self) -> Path | None:
        p = self.build_dir / DEEPSPEED_JSON
        return p if self.plan.uses_deepspeed else None

    def deepspeed_config(self) -> dict[str, Any]:
        p = self.deepspeed_json
        if p is None:
            return {}
        from ..compiler.read.files import FileError, load_json

        try:
            data = load_json(p, "DeepSpeed config")
        except FileError as exc:
            raise RunError(f"{exc.message}; recompile with `tuner compile`") from None
        if not isinstance(data, dict):
            raise RunError(f"{p} is not a JSON object; recompile with `tuner compile`")
        return data

    @property
    def base_dir(self) -> Path:
        """The project directory: where the settings file is (the manifest records it relative
        to the build directory, so a copied project still finds it). Relative paths in the
        settings and in the artefacts resolve against it, never against the working directory."""
        sf = self.manifest.get("settings_file")
        return (self.build_dir / sf).resolve().parent if sf else self.build_dir.resolve().parent

    @property
    def output_dir(self) -> Path:
        p = Path(self.settings.output.dir).expanduser()
        return p if p.is_absolute() else (self.base_dir / p)

    @property
    def strategy(self) -> Strategy:
        return self.plan.strategy


def load(build_dir: Path) -> Artefacts:
    build_dir = Path(build_dir)
    mf = build_dir / MANIFEST
    if not build_dir.is_dir():
        raise RunError(f"build directory not found: {build_dir}; "
                       "compile first (`tuner compile settings.toml`) or pass the settings file to `tuner run`")
    if not mf.is_file():
        raise RunError(f"{build_dir} has no {MANIFEST}; it is not a tuner build directory "
                       "(compile with `tuner compile settings.toml`)")
    from ..compiler.read.files import FileError, load_json

    try:
        manifest = load_json(mf, "manifest")
    except FileError as exc:
        raise RunError(f"{exc.message}; recompile with `tuner compile`") from None
    problem = manifest_problem(manifest)
    if problem:
        raise RunError(f"{mf} is damaged, edited by hand or from another tuner version ({problem}); "
                       "recompile with `tuner compile SETTINGS`")
    settings = Settings.from_dict(manifest["settings"])
    plan = Plan.from_dict(manifest["plan"])
    arts = Artefacts(build_dir.resolve(), manifest, settings, plan)
    if not arts.accelerate_yaml.is_file():
        raise RunError(f"{arts.accelerate_yaml} is missing; recompile with `tuner compile`")
    if plan.uses_deepspeed and not (build_dir / DEEPSPEED_JSON).is_file():
        raise RunError(f"{build_dir / DEEPSPEED_JSON} is missing; recompile with `tuner compile`")
    check_unchanged(arts)
    return arts


def check_unchanged(arts: Artefacts) -> None:
    """Refuse a build from another manifest version, or whose artefacts were edited after
    `tuner compile` wrote them: the manifest (and every check behind it) describes the
    files as compiled, so an edited file would run unchecked."""
    fix = "re-run `tuner compile` on the settings file (change the settings, not the build)"
    version = arts.manifest.get("manifest_version")
    if version != MANIFEST_VERSION:
        raise RunError(f"{arts.build_dir / MANIFEST} has manifest_version {version!r}; this tuner reads "
                       f"version {MANIFEST_VERSION}: {fix}")
    recorded = arts.manifest.get("artefacts") or {}
    for name in (ACCELERATE_YAML, DEEPSPEED_JSON):
        path = arts.build_dir / name
        if name not in recorded:
            continue
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            raise RunError(f"cannot read {path}: {exc.strerror or exc}; {fix}") from None
        if digest != recorded[name]:
            raise RunError(f"{path} was changed after `tuner compile` wrote it (its sha256 differs from "
                           f"the manifest's); {fix}")


#: The plan's fields and their JSON types, from the compiler's `Plan` (the strategy is its string).
#: The manifest's plan entries: the `Plan`'s fields and the two it derives from the strategy.
_PLAN_TYPES = {**{name: str if kind is Strategy else kind for name, kind in typing.get_type_hints(Plan).items()},
               "uses_deepspeed": bool, "uses_fsdp": bool}


def manifest_problem(manifest: Any) -> str | None:
    """What makes a manifest unusable for a run, or None. The settings are checked against
    the settings schema (types, ranges, every key), the plan field by field: the runtime
    must not discover a hand edit as a traceback on every rank."""
    from jsonschema import Draft202012Validator

    from ..compiler.canonical.value_checks import numeric_problem
    from ..compiler.keys.schema import index, load_schema

    if not isinstance(manifest, dict):
        return "not a JSON object"
    if manifest.get("manifest_version") != MANIFEST_VERSION:
        return (f"manifest_version {manifest.get('manifest_version')!r}, expected {MANIFEST_VERSION}: "
                "re-run `tuner compile` on the settings file")
    settings, plan = manifest.get("settings"), manifest.get("plan")
    if not isinstance(settings, dict) or not isinstance(plan, dict):
        return "no 'settings' or 'plan' object"
    idx = index()
    for path, info in idx.keys.items():
        section = settings.get(info.section)
        if not isinstance(section, dict) or info.name not in section:
            return f"settings.{path} is missing"
        problem = numeric_problem(info.prop, section[info.name])
        if problem:
            return f"settings.{path} {problem}"
    unknown = sorted(f"{sec}.{key}" for sec, body in settings.items() if isinstance(body, dict)
                     for key in body if f"{sec}.{key}" not in idx.keys)
    if unknown or set(settings) - set(idx.sections):
        return f"unknown settings {', '.join(unknown or sorted(set(settings) - set(idx.sections)))}"
    error = next(iter(Draft202012Validator(load_schema()).iter_errors(settings)), None)
    if error is not None:
        return f"settings.{'.'.join(map(str, error.absolute_path))}: {error.message}"
    for key, kind in _PLAN_TYPES.items():
        value = plan.get(key)
        if not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or (isinstance(value, int) and value < 1))):
            return f"plan.{key} is {value!r}"
    if set(plan) - set(_PLAN_TYPES):
        return f"unknown plan keys {', '.join(sorted(set(plan) - set(_PLAN_TYPES)))}"
    if plan["strategy"] not in set(Strategy):
        return f"plan.strategy {plan['strategy']!r} is not one of {', '.join(Strategy)}"
    strategy = Strategy(plan["strategy"])
    for key, derived in (("uses_deepspeed", strategy.is_deepspeed), ("uses_fsdp", strategy.is_fsdp)):
        if plan[key] != derived:
            return f"plan.{key} is {plan[key]!r} but plan.strategy is {strategy}"
    topology = manifest.get("topology", {})
    if not isinstance(topology, dict):
        return "topology is not an object"
    return None
