"""The data keys of axolotl and LLaMA-Factory training YAMLs -> tuner's [data] keys.

What has a [data] equivalent is imported: the sequence length, packing, the held-out
fraction, one local data file (with its ``ds_type`` when that is the loader its suffix picks),
the row form of an axolotl dataset (``type: chat_template`` is format chat with its messages
field, ``completion`` is format text with its text field), its split and a Jinja chat template
(``chat_template: jinja``, or ``chat_template_jinja`` alone, which axolotl reads as jinja). What
the file leaves unset is imported as the tool's own default where tuner's differs: neither tool
holds rows out, and neither packs (LLaMA-Factory packs for ``stage: pt`` and with
``neat_packing``). The rest is listed as not imported, each key with the reason (tuner reads
local files and takes a Jinja text, not the tools' own named templates or prompt formats).
"""

from __future__ import annotations

from typing import Any

from ..keys import paths as K
from .base import Imported

#: axolotl dataset types -> tuner's data.format, and the entry's field key -> tuner's column key.
_AXOLOTL_TYPES = {"chat_template": ("chat", "field_messages", K.DATA_MESSAGES_COLUMN),
                  "completion": ("text", "field", K.DATA_TEXT_COLUMN)}
#: Dataset entry keys imported (the rest of an entry is listed with a reason).
_ENTRY_DONE = {"path", "type", "split", "field_messages", "field"}
#: axolotl's ds_type (the `datasets` loader) -> the suffixes tuner reads with that same loader.
_DS_TYPES = {"json": (".json", ".jsonl"), "parquet": (".parquet",), "csv": (".csv",), "arrow": (".arrow",),
             "text": (".txt",)}


def _is_local(path: str) -> bool:
    return path.startswith((".", "/")) or path.endswith((".json", ".jsonl", ".parquet", ".txt", ".csv", ".arrow"))


def _fraction(key: str, value: Any, src: str, out: Imported, other: dict[str, Any]) -> None:
    """A held-out fraction -> data.validation_split (tuner holds out 0 to 0.5); a row count or a
    larger fraction is listed."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if 0 <= number <= 0.5:
        out.set(K.DATA_VALIDATION_SPLIT, number, src)
    else:
        other[key] = value
        out.remarks.append(f"{src}: {key} {value!r} is not a fraction from 0 to 0.5 (tuner's data.validation_split "
                           "holds out a fraction of the rows): not imported")


def _packing_and_held_out(data: dict[str, Any], keys: tuple[str, str], tool: str, packs: bool, src: str,
                          out: Imported, other: dict[str, Any]) -> None:
    """The tool's packing flag -> data.packing and its held-out fraction -> data.validation_split
    (axolotl and LLaMA-Factory spell the same two keys differently). Unset, each is the tool's own
    default, not tuner's (packing on, 0.1 held out): `packs` for packing, nothing held out."""
    packing, held_out = keys
    if isinstance(data.get(packing), bool):
        out.set(K.DATA_PACKING, data[packing], src)
        other.pop(packing, None)
    elif packing not in data:
        out.default(K.DATA_PACKING, packs, src, f"no {packing}: {tool} {'packs' if packs else 'does not pack'} "
                    f"without it, imported as data.packing = {str(packs).lower()}")
    if held_out in data:
        other.pop(held_out, None)
        _fraction(held_out, data[held_out], src, out, other)
    else:
        out.default(K.DATA_VALIDATION_SPLIT, 0.0, src, f"no {held_out}: {tool} holds no rows out, imported as "
                    "data.validation_split = 0 (tuner's default holds out 0.1)")


def axolotl_data(data: dict[str, Any], src: str, out: Imported, other: dict[str, Any]) -> None:
    """axolotl's data keys (popped from `other` where imported)."""
    _packing_and_held_out(data, ("sample_packing", "val_set_size"), "axolotl", False, src, out, other)
    template = data.get("chat_template")
    if template in ("jinja", None) and isinstance(data.get("chat_template_jinja"), str):
        # axolotl reads chat_template_jinja (a Jinja text or a file's path, as data.chat_template is)
        # when chat_template is jinja or unset
        out.set(K.DATA_CHAT_TEMPLATE, data["chat_template_jinja"], src)
        other.pop("chat_template", None)
        other.pop("chat_template_jinja", None)
    elif template == "tokenizer_default":
        out.set(K.DATA_CHAT_TEMPLATE, "", src)  # the tokenizer's own, as tuner's empty value
        other.pop("chat_template", None)
    elif template:
        out.remarks.append(f"{src}: chat_template {template!r} is one of axolotl's named templates; tuner uses the "
                           "tokenizer's own template or a Jinja text in data.chat_template: not imported")
    _datasets(data.get("datasets"), src, out, other)


def _datasets(datasets: Any, src: str, out: Imported, other: dict[str, Any]) -> None:
    """One dataset entry: its local path -> data.path, its form -> data.format / column, its split
    -> data.split. A hub data set's path, several data sets and any other entry key are listed."""
    if not datasets:
        return
    entries = [d for d in datasets if isinstance(d, dict)] if isinstance(datasets, list) else []
    if len(entries) != 1 or len(datasets) != 1:
        other["datasets"] = datasets
        out.remarks.append(f"{src}: datasets lists {len(datasets) if isinstance(datasets, list) else 'no'} entries; "
                           "tuner trains on one data source (data.path or data.files): not imported")
        return
    entry = entries[0]
    left = {k: v for k, v in entry.items() if k not in _ENTRY_DONE}
    path = entry.get("path")
    if isinstance(path, str) and _is_local(path):
        out.set(K.DATA_PATH, path, src)
        if not path.startswith("/"):
            out.remarks.append(f"{src}: datasets path {path!r} is relative: axolotl reads it from the directory it is "
                               "started in, tuner from the settings file's folder; put the data there or write "
                               "data.path in full")
        if path.lower().endswith(_DS_TYPES.get(str(entry.get("ds_type")), ())):
            left.pop("ds_type")  # the loader tuner picks from the suffix
    elif path:
        left["path"] = path
        out.remarks.append(f"{src}: datasets path {path!r} is a Hugging Face Hub data set; tuner reads local data "
                           "only (no download at run time): save it locally and set data.path")
    kind = entry.get("type")
    if isinstance(kind, str) and kind in _AXOLOTL_TYPES:
        fmt, field, column = _AXOLOTL_TYPES[kind]
        out.set(K.DATA_FORMAT, fmt, src)
        if isinstance(entry.get(field), str):
            out.set(column, entry[field], src)
    elif isinstance(kind, dict):
        left["type"] = kind
        fields = ", ".join(sorted(k for k in kind if k.startswith("field")))
        out.remarks.append(f"{src}: datasets type is a user-defined prompt format ({fields or 'its fields'} put "
                           "together by its format string); tuner's instruction format reads one prompt column "
                           "and one completion column as they are: not imported")
    elif kind:
        left["type"] = kind
        out.remarks.append(f"{src}: datasets type {kind!r} is axolotl's own prompt format; tuner reads chat "
                           "(messages), instruction (prompt/completion) or text rows: not imported")
    split = entry.get("split")
    if isinstance(split, str) and split.isidentifier():
        out.set(K.DATA_SPLIT, split, src)
    elif split:
        left["split"] = split
        out.remarks.append(f"{src}: datasets split {split!r} is a slice; tuner's data.split names a whole split: "
                           "not imported")
    extra = sorted(k for k in left if k not in ("path", "type", "split"))
    if extra:
        out.remarks.append(f"{src}: datasets entry key(s) {', '.join(extra)} have no [data] equivalent (tuner reads "
                           "role/content messages, or the columns data.*_column names): not imported")
    if left:
        other["datasets"] = [left]


def llamafactory_data(data: dict[str, Any], src: str, out: Imported, other: dict[str, Any]) -> None:
    """LLaMA-Factory's data keys (popped from `other` where imported)."""
    stage = data.get("stage", "sft")
    _packing_and_held_out(data, ("packing", "val_size"), "LLaMA-Factory", stage == "pt", src, out, other)
    if data.get("neat_packing") is True:
        out.set(K.DATA_PACKING, True, src)  # LLaMA-Factory packs then, each document attending to itself only
        other.pop("neat_packing", None)
    elif out.values.get(K.DATA_PACKING) is True:
        out.remarks.append(f"{src}: LLaMA-Factory's packing without neat_packing lets attention cross the documents "
                           "packed into a row; tuner's data.packing keeps it inside each document")
    if data.get("dataset"):
        out.remarks.append(f"{src}: dataset {data['dataset']!r} names entries of LLaMA-Factory's dataset_info.json, "
                           "not files: not imported; set data.path to the file an entry points to")
    if data.get("template"):
        out.remarks.append(f"{src}: template {data['template']!r} is one of LLaMA-Factory's named prompt templates; "
                           "tuner uses the tokenizer's own chat template or a Jinja text in data.chat_template: "
                           "not imported")
