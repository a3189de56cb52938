"""`tuner import`: foreign configs -> canonical settings.toml.

`formats.detect` recognises each file by its structure (accelerate, DeepSpeed, SimpleTuner
flat or WebUI, HF Trainer, ms-swift) and its reader turns it into canonical settings values
(``{"fsdp.version": 2}``) plus remarks. Nothing is dropped silently: an accelerate YAML's
unmodelled keys survive through ``accelerate.base``; other files' keys that are not about
distributed training are named in one note and listed as comments in the written file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..keys import paths as K
from ..keys.schema import index
from . import FORMATS, READERS, detect, unrecognised_message
from .base import Imported, ImportError_, ImportRefused, load

__all__ = ["FORMATS", "Imported", "ImportError_", "ImportRefused", "import_files", "load", "to_toml"]


def import_files(paths: list[Path]) -> Imported:
    """Read each source, recognise its format by structure, and merge what it says.

    Raises ImportError_ (unreadable) or ImportRefused (unrecognised, or a choice tuner has
    no equivalent for): nothing is imported then.
    """
    out = Imported()
    for path in paths:
        data = load(path)
        if not isinstance(data, dict):
            raise ImportRefused(f"{path}: expected a mapping at top level, not {type(data).__name__}; "
                                + unrecognised_message(path.name).split(". ", 1)[1])
        fmt = detect(data)
        if fmt is None:
            raise ImportRefused(unrecognised_message(str(path)))
        out.sources.append(str(path))
        out.formats.append(fmt)
        READERS[fmt](data, path, out)
    for finish in out.finish:
        finish(out)
    for src, keys in out.not_distributed.items():
        out.remarks.append(f"{src}: {len(keys)} key(s) not about distributed training, not imported "
                           f"(listed at the end of the file): {', '.join(sorted(keys))}")
    return out


def to_toml(imp: Imported) -> str:
    """The imported values as a canonical, sectioned settings.toml (tomlkit)."""
    import tomlkit

    idx = index()
    values = _canonical_spellings(imp.values)
    for path in (K.TRAINING_OPTIMIZER, K.MODEL_FAMILY, K.TRAINING_LR_SCHEDULER):
        # another trainer's vocabulary mapped onto tuner's: say so (e.g. SimpleTuner's adamw_bf16)
        if path in values and isinstance(imp.values[path], str) and values[path] != imp.values[path]:
            imp.remarks.append(f"{path}: {imp.values[path]!r} is written as {values[path]!r} "
                               "(what tuner compiles and trains with)")
    doc = tomlkit.document()
    doc.add(tomlkit.comment(f"Imported by `tuner import` from {', '.join(imp.sources)}."))
    for remark in imp.remarks:
        doc.add(tomlkit.comment(remark))
    for section in idx.sections:
        keys = [p for p in imp.values if p.startswith(section + ".") and values[p] is not None]  # TOML has no null
        if not keys:
            continue
        table = tomlkit.table()
        for path in sorted(keys, key=list(idx.keys).index):
            table.add(path.split(".", 1)[1], _tomlable(values[path]))
        doc.add(section, table)
    if imp.unmodelled and not any(p == K.ACCELERATE_BASE for p in imp.values):
        doc.add(tomlkit.nl())
        doc.add(tomlkit.comment("Not used by tuner (kept here for reference):"))
        for key, value in sorted(imp.unmodelled.items()):
            doc.add(tomlkit.comment(f"  {key} = {json.dumps(value, default=str)}"))
    if imp.not_distributed:
        doc.add(tomlkit.nl())
        doc.add(tomlkit.comment("Not about distributed training, not imported (for your own trainer):"))
        for src, source_keys in imp.not_distributed.items():
            doc.add(tomlkit.comment(f"  from {src}:"))
            for key, value in sorted(source_keys.items()):
                doc.add(tomlkit.comment(f"  {key} = {json.dumps(value, default=str, ensure_ascii=False)}"))
    return tomlkit.dumps(doc)


def _canonical_spellings(values: dict[str, Any]) -> dict[str, Any]:
    """Foreign spellings (FULL_STATE_DICT, TRANSFORMER_BASED_WRAP) -> tuner's own, via the
    compiler's normaliser; values it cannot normalise are kept as written so that the
    compile of the imported file reports them."""
    from ..canonical.normalise import normalise
    from ..diagnostics import Diagnostics

    nested: dict[str, dict[str, Any]] = {}
    for path, value in values.items():
        section, name = path.split(".", 1)
        nested.setdefault(section, {})[name] = value
    n = normalise(nested, Diagnostics())
    out = {}
    for path, value in values.items():
        section, name = path.split(".", 1)
        out[path] = value if path in n.invalid or path == K.DEEPSPEED_CONFIG else n.settings[section][name]
    return out


def _tomlable(value: Any) -> Any:
    """TOML has no null: drop None entries from nested tables."""
    if isinstance(value, dict):
        return {k: _tomlable(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_tomlable(v) for v in value if v is not None]
    return value
