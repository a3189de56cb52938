"""Which optional packages a run needs, and the pip extra that installs each.

`tuner compile` needs none of them. ``pip install 'tuner-train[runtime]'`` (the distribution's name; the command and import
package are `tuner`) gives torch, accelerate
and transformers (every run); DeepSpeed, diffusers and peft come with their own extras so
that a DDP/FSDP run of a language model installs none of them (pyproject.toml). A run whose
build needs a missing one is refused before any rank starts, naming the extra.

Plain Python, no third-party import: `tuner.commands.cli` reads `install_hint` when a command meets
a missing package.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .artefacts import Artefacts

#: import name -> the extra that installs it.
EXTRA_OF = {
    "accelerate": "runtime", "transformers": "runtime", "safetensors": "runtime", "tqdm": "runtime",
    "datasets": "runtime",
    "deepspeed": "deepspeed", "diffusers": "diffusion", "peft": "lora", "textual": "tui", "tensorboard": "tracking",
}
#: Packages a run may need that no extra installs (trackers other than TensorBoard, bitsandbytes).
PLAIN = {"trackio", "wandb", "mlflow", "comet_ml", "aim", "clearml", "dvclive", "swanlab", "bitsandbytes"}
TORCH_HINT = ("install torch first (pip install torch==2.13.0 for a CPU wheel, or the build for your GPUs), "
              "then pip install 'tuner-train[runtime]'")


def install_hint(package: str) -> str | None:
    """How to install the top-level package `package` (None: not one of tuner's optional ones)."""
    if package == "torch":
        return TORCH_HINT
    extra = EXTRA_OF.get(package)
    if extra == "runtime":
        return "pip install 'tuner-train[runtime]' (install torch first, see the README)"
    if extra:
        return f"pip install 'tuner-train[{extra}]'"
    return f"pip install {package}" if package in PLAIN else None


def missing(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is None
    except (ImportError, ValueError):  # a broken install, or a module hidden as None in sys.modules
        return True


def needed(arts: Artefacts, trains: bool) -> dict[str, str]:
    """package -> why this run needs it. `trains`: tuner's own trainer runs (`tuner run`), not
    a person's script (`tuner launch`, which only needs what the launcher itself uses)."""
    need = {"torch": "every run", "accelerate": "every run"}
    if arts.plan.uses_deepspeed:
        need["deepspeed"] = f"this build's strategy ({arts.plan.strategy})"
    if trains:
        s = arts.settings
        need["transformers"] = "tuner's trainer"
        if s.model.trained_family in ("causal_lm", "embedding"):
            need["datasets"] = "tuner's data layer"
        if s.model.trained_family == "diffusion":
            need["diffusers"] = "model.family = \"diffusion\""
        if s.model.type == "lora":
            need["peft"] = "model.type = \"lora\""
        if s.model.base_precision == "nf4-bnb":
            need["bitsandbytes"] = "model.base_precision = \"nf4-bnb\" (QLoRA)"
        from .tracking import PACKAGES, requested

        for name in requested(s):
            need[PACKAGES[name]] = f"logging.log_with = [\"{name}\"]"
    return need


def check_installed(arts: Artefacts, trains: bool) -> None:
    """Raise `RunError` naming the first missing package, why it is needed and its extra."""
    from .artefacts import RunError

    for package, why in needed(arts, trains).items():
        if missing(package):
            raise RunError(f"{why} needs {package}, which is not installed: {install_hint(package)}")
