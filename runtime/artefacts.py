"""The compiled artefacts a run reads: manifest.json, accelerate.yaml, deepspeed.json.

The runtime never reads settings.toml: everything comes from the build directory. This
module has no torch import, so `tuner run` can report a bad build directory at once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.compiler.emit import MANIFEST_VERSION
from tuner.compiler.rules import Plan
from tuner.compiler.settings import Settings

MANIFEST = "manifest.json"
ACCELERATE_YAML = "accelerate.yaml"
DEEPSPEED_JSON = "deepspeed.json"


class RunError(Exception):
    """A problem the user can fix; printed as one message, exit status non-zero, no traceback."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


@dataclass
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
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise RunError(f"cannot read {p}: {exc}; recompile with `tuner compile`") from None

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
    def strategy(self) -> str:
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
    try:
        manifest = json.loads(mf.read_text(encoding="utf-8"))
        settings = Settings.from_dict(manifest["settings"])
        plan = Plan(**manifest["plan"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise RunError(f"{mf} is unreadable or from another tuner version ({exc}); recompile") from None
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
