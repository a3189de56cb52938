"""tuner: a terminal wizard, config compiler and training runtime for multi-GPU training.

Subpackages (each a top-level folder of the repository, mapped in pyproject.toml):

* `tuner.compiler`: settings.toml -> accelerate YAML + DeepSpeed JSON + manifest (no torch)
* `tuner.runtime`: launches ranks and trains from the compiled artefacts (torch)
* `tuner.tui`: the Textual wizard (no torch at start-up)
* `tuner.schemas`: the settings JSON Schema (package data)
"""

__version__ = "0.1.0"
