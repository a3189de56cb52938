"""Trackers through accelerate's own tracker API, from the ``[logging]`` settings.

``logging.log_with`` (plus ``training.tensorboard = true``, which means "tensorboard") names
the trackers; ``Accelerator(log_with=..., project_config=...)`` creates them on rank 0 and
`start` calls ``init_trackers`` with the flattened settings as the run's configuration.
The `progress.Reporter` then sends every logged metric to ``accelerator.log`` beside
metrics.jsonl. Files go to ``logging.dir`` (default OUTPUT_DIR/logs): TensorBoard events
under ``logs/<project>/``; with ``logging.offline`` W&B runs offline there and MLflow uses a
file store there (unless MLFLOW_TRACKING_URI is set).

No third-party import at module level: `extras` reads `requested` before any rank starts.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from ..compiler.keys.settings import Settings

#: tracker name -> the package it imports (and pip installs).
PACKAGES = {"tensorboard": "tensorboard", "trackio": "trackio", "wandb": "wandb", "mlflow": "mlflow",
            "comet_ml": "comet_ml", "aim": "aim", "clearml": "clearml", "dvclive": "dvclive", "swanlab": "swanlab"}


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def requested(settings: Settings) -> list[str]:
    """The trackers this run logs to, in order, without repeats; "all" is every installed one."""
    names = list(settings.logging.log_with)
    if settings.training.tensorboard:
        names.append("tensorboard")
    out: list[str] = []
    for name in names:
        for n in ([k for k, pkg in PACKAGES.items() if _installed(pkg)] if name == "all" else [name]):
            if n not in out:
                out.append(n)
    return out


def logging_dir(settings: Settings, output_dir: Path, base_dir: Path) -> Path:
    d = settings.logging.dir
    if not d:
        return Path(output_dir) / "logs"
    p = Path(d).expanduser()
    return p if p.is_absolute() else Path(base_dir) / p


def accelerator_kwargs(settings: Settings, output_dir: Path, base_dir: Path) -> dict[str, Any]:
    """``Accelerator`` arguments for the trackers (none: an empty dict)."""
    names = requested(settings)
    if not names:
        return {}
    from accelerate.utils import ProjectConfiguration

    logs = logging_dir(settings, output_dir, base_dir)
    return {"log_with": names,
            "project_config": ProjectConfiguration(project_dir=str(output_dir), logging_dir=str(logs))}


def flat_config(settings: Settings) -> dict[str, Any]:
    """``{"section.key": value}`` with values trackers store (bool, int, float, str)."""
    out: dict[str, Any] = {}
    for section, keys in settings.to_dict().items():
        for key, value in keys.items():
            ok = isinstance(value, (bool, int, float, str))
            out[f"{section}.{key}"] = value if ok else json.dumps(value, sort_keys=True, default=str)
    return out


def start(accelerator, settings: Settings, output_dir: Path, base_dir: Path) -> list[str]:
    """``init_trackers`` (every rank calls it; accelerate starts trackers on rank 0 only).
    Returns the tracker names, for the start-of-run summary."""
    names = requested(settings)
    if not names:
        return []
    lg = settings.logging
    logs = logging_dir(settings, output_dir, base_dir)
    kwargs: dict[str, dict[str, Any]] = {}
    if "wandb" in names:
        kwargs["wandb"] = {"dir": str(logs), **({"name": lg.run_name} if lg.run_name else {}),
                           **({"mode": "offline"} if lg.offline else {})}
    if "trackio" in names and lg.run_name:
        kwargs["trackio"] = {"name": lg.run_name}
    if "mlflow" in names:
        kwargs["mlflow"] = {"logging_dir": str(logs), **({"run_name": lg.run_name} if lg.run_name else {})}
        if lg.offline and accelerator.is_main_process and not os.environ.get("MLFLOW_TRACKING_URI"):
            os.environ["MLFLOW_TRACKING_URI"] = (logs / "mlruns").resolve().as_uri()
    if accelerator.is_main_process:
        logs.mkdir(parents=True, exist_ok=True)
    accelerator.init_trackers(lg.project or "tuner", config=flat_config(settings), init_kwargs=kwargs)
    return names
