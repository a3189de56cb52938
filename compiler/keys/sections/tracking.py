"""Declared settings: where a run's metrics go besides metrics.jsonl (accelerate's trackers).

Each field is one key, declared once with `setting` (see `compiler/keys/declare.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..declare import setting

#: Trackers accelerate's tracker API knows (``Accelerator(log_with=...)``); "all" is every
#: one of them that is installed.
TRACKERS = ("tensorboard", "trackio", "wandb", "mlflow", "comet_ml", "aim", "clearml", "dvclive", "swanlab")


def tracker_names(value: Any) -> Any:
    """``"tensorboard"`` / ``"TensorBoard, wandb"`` / a list -> lower-case names; "none"
    (the HF Trainer's ``report_to = "none"``) is no tracker."""
    if isinstance(value, str):
        value = [part for part in value.split(",")]
    if isinstance(value, list):
        names = [v.strip().lower() if isinstance(v, str) else v for v in value]
        return [n for n in names if n not in ("", "none")]
    return value


@dataclass(frozen=True)
class LoggingSettings:
    """Trackers (TensorBoard, trackio, Weights & Biases, MLflow ...) through accelerate's tracker API, beside
    OUTPUT_DIR/metrics.jsonl."""

    title: ClassVar[str] = "Logging"
    step: ClassVar[str] = "precision"
    log_with: list[str] = setting(
        [], aliases=("report_to", "log_with"), spellings=tracker_names,
        help="Trackers that also receive every logged metric: " + ", ".join(TRACKERS) + ", or all (every "
             "installed one). Each must be installed (tensorboard: pip install 'tuner-train[tracking]').")
    project: str = setting(
        "tuner", aliases=("tracker_project_name", "project_name"),
        help="Project (experiment) name the trackers file the run under.")
    run_name: str = setting(
        "", aliases=("tracker_run_name", "run_name"),
        help="Run name shown by the trackers; empty lets each tracker choose.")
    dir: str = setting(
        "", aliases=("logging_dir",),
        help="Folder for trackers that write files (TensorBoard events, offline W&B and MLflow runs); "
             "empty: OUTPUT_DIR/logs. Relative to the settings file.")
    offline: bool = setting(
        False, aliases=("tracker_offline",),
        help="Keep trackers that have an offline mode local (W&B mode=offline, MLflow to a file store in "
             "logging.dir); TensorBoard and trackio write locally anyway.")
