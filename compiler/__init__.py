"""tuner's config compiler: settings.toml -> accelerate YAML + DeepSpeed JSON + manifest.

Pure Python; never imports torch, accelerate, deepspeed or textual. The compile itself is
`compile.py` (`compile_file`, `compile_text`, `compile_inputs`); this package file imports
nothing, so importing one helper (`tuner.compiler.read.files`) loads only that helper.
docs/code-map.md lists the stage folders and their order.
"""
