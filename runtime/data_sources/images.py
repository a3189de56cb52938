"""Where diffusion images and captions come from, as rows ``{"image", "caption", "label"}``.

* An image folder, Hugging Face ``imagefolder`` style: ``metadata.jsonl`` or
  ``metadata.csv`` (a ``file_name`` column and a caption column: ``data.caption_column``, else
  the first of `CAPTION_COLUMNS`), in the folder or any subfolder (names relative to that
  metadata file); tuner's own ``captions.jsonl`` (``{"file", "caption", "label"?}``); or a
  ``.txt`` caption beside each image.
* A `datasets` source with an image column: a ``save_to_disk`` folder, or a parquet /
  arrow / jsonl / csv file (``data.image_column``, else the column whose feature is an
  ``Image``, else ``image``). Images stay in the (memory-mapped) table, undecoded, until a
  batch needs them: a row's ``image`` is its index there.

`check_captions` refuses a set whose every caption is empty (the fix is named) and warns
when some are.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..families.base import FamilyError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
#: Caption columns recognised without ``data.caption_column`` (datasets' imagefolder uses
#: ``text``; diffusers' scripts and SimpleTuner ``caption`` / ``prompt``).
CAPTION_COLUMNS = ("text", "caption", "prompt", "captions")
METADATA_FILES = ("metadata.jsonl", "metadata.csv")
DATASET_FILES = {".parquet": "parquet", ".arrow": "arrow", ".jsonl": "json", ".json": "json", ".csv": "csv"}


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSONL data file.

    Every problem is a `FamilyError` naming the file (and line): missing file, bad JSON,
    a line that is not an object.
    """
    import json

    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FamilyError(f"data file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FamilyError(f"cannot read {path}: {exc}") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FamilyError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise FamilyError(f"{path}:{n}: each line must be a JSON object")
        yield n, item


def _caption_column(columns: list[str], where: str, wanted: str) -> str:
    if wanted:
        if wanted not in columns:
            raise FamilyError(f"{where} has no column {wanted!r} (data.caption_column); its columns: "
                              f"{', '.join(columns)}")
        return wanted
    for name in CAPTION_COLUMNS:
        if name in columns:
            return name
    raise FamilyError(f"{where} has no caption column ({', '.join(CAPTION_COLUMNS)}); its columns: "
                      f"{', '.join(columns)}. Name yours with data.caption_column = \"...\"")


def _label(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _metadata_rows(meta: Path, caption_column: str) -> list[dict[str, Any]]:
    """Rows of one HF imagefolder metadata file (names relative to its folder)."""
    if meta.suffix == ".csv":
        try:
            with open(meta, newline="", encoding="utf-8") as fh:
                items = list(enumerate(csv.DictReader(fh), 2))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise FamilyError(f"cannot read {meta}: {exc}") from None
    else:
        items = list(read_jsonl(meta))
    if not items:
        raise FamilyError(f"{meta} is empty; it needs one line per image with file_name and a caption")
    column = _caption_column(list(items[0][1]), str(meta), caption_column)
    rows = []
    for n, item in items:
        name = item.get("file_name")
        if not isinstance(name, str) or not name:
            raise FamilyError(f"{meta}:{n}: each row needs a 'file_name' naming an image (datasets' imagefolder form)")
        caption = item.get(column)
        if isinstance(caption, list):  # several captions per image: the first
            caption = caption[0] if caption else ""
        rows.append({"image": str(meta.parent / name), "caption": "" if caption is None else str(caption),
                     "label": _label(item.get("label", 0))})
    return rows


def read_image_folder(folder: Path, caption_column: str = "") -> list[dict[str, Any]]:
    """Rows ``{"image": path, "caption", "label"}`` of an image folder (see the module doc)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FamilyError(f"data.path {folder} is not an image folder")
    rows: list[dict[str, Any]] = []
    metas = sorted(p for name in METADATA_FILES for p in folder.rglob(name))
    index = folder / "captions.jsonl"
    if metas:
        for meta in metas:
            rows += _metadata_rows(meta, caption_column)
    elif index.is_file():
        for n, item in read_jsonl(index):
            name = item.get("file") or item.get("image") or item.get("file_name")
            if not isinstance(name, str):
                raise FamilyError(f"{index}:{n}: each line needs a 'file' naming an image")
            rows.append({"image": str(folder / name), "caption": str(item.get("caption", item.get("text", ""))),
                         "label": _label(item.get("label", 0))})
    else:
        for p in sorted(folder.rglob("*")):
            if p.suffix.lower() in IMAGE_SUFFIXES:
                txt = p.with_suffix(".txt")
                rows.append({"image": str(p), "caption": txt.read_text().strip() if txt.is_file() else "",
                             "label": 0})
    missing = [r["image"] for r in rows if not Path(r["image"]).is_file()]
    if missing:
        raise FamilyError(f"{len(missing)} image(s) listed but not found, e.g. {missing[0]}")
    if not rows:
        raise FamilyError(f"no images in {folder} ({', '.join(IMAGE_SUFFIXES)})")
    return rows


def is_dataset_source(path: Path) -> bool:
    """A `save_to_disk` folder or a data file `datasets` reads (not an image folder)."""
    if path.is_dir():
        return (path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file()
    return path.suffix.lower() in DATASET_FILES


def read_image_dataset(path: Path, image_column: str = "", caption_column: str = ""):
    """(rows, table) of a `datasets` source: ``table`` is the set with its image column
    undecoded (``{"bytes", "path"}``); a row's ``image`` is its index in it."""
    try:
        import datasets
    except ImportError:
        raise FamilyError(f"data.path {path} is read with the datasets package, which is not installed: "
                          "pip install datasets") from None
    if not path.exists():
        raise FamilyError(f"data.path {path} does not exist")
    try:
        if path.is_dir():
            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                if "train" not in ds:
                    raise FamilyError(f"{path} holds the splits {', '.join(ds)}, none named 'train'")
                ds = ds["train"]
        else:
            ds = datasets.load_dataset(DATASET_FILES[path.suffix.lower()], data_files=str(path), split="train")
    except FamilyError:
        raise
    except Exception as exc:  # datasets' own errors: one line, naming the file
        raise FamilyError(f"cannot read {path} with datasets: {exc}") from None
    columns = list(ds.column_names)
    column = image_column or next((c for c, f in ds.features.items() if isinstance(f, datasets.Image)), "")
    column = column or ("image" if "image" in columns else "")
    if column not in columns:
        raise FamilyError(f"{path} has no image column{f' {image_column!r}' if image_column else ''} "
                          f"(data.image_column); its columns: {', '.join(columns)}")
    if not isinstance(ds.features[column], datasets.Image):
        if not all(isinstance(v, str) for v in ds[column]):
            raise FamilyError(f"{path}: column {column!r} holds neither images nor image file names")
        base = path if path.is_dir() else path.parent  # file names are relative to the data file
        ds = ds.map(lambda r: {column: str(base / r[column])}, keep_in_memory=True)  # nothing written beside the data
    ds = ds.cast_column(column, datasets.Image(decode=False))
    cap = _caption_column(columns, str(path), caption_column)
    labels = ds["label"] if "label" in columns else [0] * len(ds)
    rows = [{"image": i, "caption": "" if c is None else str(c[0] if isinstance(c, list) and c else c),
             "label": _label(lab)} for i, (c, lab) in enumerate(zip(ds[cap], labels, strict=False))]
    if not rows:
        raise FamilyError(f"{path} holds no rows")
    return rows, ds.select_columns([column]).rename_column(column, "image")


def check_captions(rows: list[dict[str, Any]], where: str, caption_dropout: float) -> str | None:
    """Refuse a set with no caption at all (unless every caption is dropped on purpose);
    return a warning when some images have none."""
    empty = sum(1 for r in rows if not str(r["caption"]).strip())
    if empty == len(rows) and caption_dropout < 1.0:
        raise FamilyError(
            f"every image in {where} has an empty caption: the model would learn no text conditioning. "
            f"Add captions (a metadata.jsonl with file_name and text, or a .txt beside each image), name the "
            f"caption column with data.caption_column, or set data.caption_dropout = 1.0 to train without text")
    if empty:
        return f"warning: {empty} of {len(rows)} images in {where} have an empty caption"
    return None
