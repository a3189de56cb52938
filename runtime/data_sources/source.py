"""Open the training data a settings file names, through Hugging Face `datasets`, offline.

What ``data.path`` (or ``data.files``) may name:

* a local file in a format `datasets` reads, by its suffix: ``.json`` / ``.jsonl``,
  ``.parquet``, ``.csv`` / ``.tsv``, ``.arrow``, ``.txt`` (one document per line, or per
  blank-line-separated paragraph when the file has blank lines);
* several files or globs (``data.files = ["shards/*.parquet"]``), read as one set;
* a folder written by ``save_to_disk`` (a ``DatasetDict``'s split is ``data.split``), or a
  folder of data files;
* ``builtin``: the small corpus tuner ships.

A Hugging Face Hub name (``org/name``) is refused with the command that fetches it: nothing is
downloaded at run time. A file `datasets` cannot read is diagnosed (`diagnose_file`): the file,
the line and what to do.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...compiler.keys import paths as K
from .errors import DataError

#: file suffix -> `datasets` builder name.
BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".tsv": "csv",
            ".arrow": "arrow", ".txt": "text", ".text": "text", ".md": "text"}
#: Marker files of a folder written by ``save_to_disk``.
DISK_MARKERS = ("dataset_dict.json", "dataset_info.json", "state.json")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class Source:
    """Where the rows come from: files of one builder, or a ``save_to_disk`` folder."""

    label: str
    """How messages name it (the path as written, or the one file)."""
    builder: str = ""
    files: list[Path] = field(default_factory=list)
    folder: Path | None = None

    def where(self, row: int | None = None) -> str:
        """``FILE`` or ``FILE: row N`` (1-based) for messages."""
        one = str(self.files[0]) if len(self.files) == 1 else (str(self.folder) if self.folder else self.label)
        return one if row is None else f"{one}: row {row + 1}"


def hub_refusal(spec: str) -> DataError:
    name = spec.strip()
    local = "data/" + name.split("/")[-1]
    return DataError(f"data.path {name!r}", "no such local file or folder, and tuner downloads nothing (it looks like "
                     "a Hugging Face Hub data set)",
                     f"fetch it once: `huggingface-cli download --repo-type dataset {name} --local-dir {local}` "
                     f"(or datasets.load_dataset({name!r}).save_to_disk({local!r})), then set data.path = {local!r}")


def resolve(specs: list[str], base_dir: Path, key: str = K.DATA_PATH) -> Source:
    """The `Source` that `specs` (paths or globs, relative to `base_dir`) name, or a DataError."""
    files: list[Path] = []
    for spec in specs:
        p = Path(spec).expanduser()
        p = p if p.is_absolute() else base_dir / p
        if any(c in spec for c in "*?["):
            hits = sorted(Path(h) for h in glob.glob(str(p), recursive=True) if Path(h).is_file())
            if not hits:
                raise DataError(f"{key} {spec!r}", "the pattern matches no file", f"check the pattern (relative to {base_dir})")
            files += hits
        elif p.is_dir():
            if any((p / m).is_file() for m in DISK_MARKERS):
                if len(specs) > 1:
                    raise DataError(str(p), "a save_to_disk folder cannot be combined with other files",
                                    f"name it alone in {key}")
                return Source(label=spec, folder=p)
            inside = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in BUILDERS)
            if not inside:
                raise DataError(str(p), "the folder holds no data file (.jsonl, .json, .parquet, .csv, .arrow, .txt) "
                                "and is not a save_to_disk folder", f"point {key} at the data")
            files += inside
        elif p.is_file():
            files.append(p)
        elif _HUB_ID.match(spec.strip()) and not p.parent.exists():
            raise hub_refusal(spec)
        else:
            raise DataError(f"{key} {spec!r}", f"data file not found: {p}",
                            f"fix {key} (relative paths are read from {base_dir})")
    builders = {BUILDERS.get(f.suffix.lower(), "") for f in files}
    if "" in builders:
        odd = next(f for f in files if f.suffix.lower() not in BUILDERS)
        raise DataError(str(odd), f"unknown data file type {odd.suffix or '(no suffix)'!r}",
                        "use .jsonl, .json, .parquet, .csv, .tsv, .arrow or .txt")
    if len(builders) > 1:
        raise DataError(", ".join(specs), f"files of several formats ({', '.join(sorted(builders))})",
                        "name files of one format per data set")
    return Source(label=", ".join(specs), builder=builders.pop(), files=files)


def _quiet_datasets() -> None:
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


def _builder_kwargs(src: Source) -> dict[str, Any]:
    if src.builder == "text":
        blank = any("\n\n" in f.read_text(encoding="utf-8", errors="replace") for f in src.files)
        return {"sample_by": "paragraph" if blank else "line"}
    if src.builder == "csv" and all(f.suffix.lower() == ".tsv" for f in src.files):
        return {"sep": "\t"}
    return {}


def open_dataset(src: Source, split: str = "train", streaming: bool = False):
    """A `datasets.Dataset` (or `IterableDataset` when streaming) of the source's rows."""
    import datasets

    _quiet_datasets()
    if src.folder is not None:
        try:
            ds = datasets.load_from_disk(str(src.folder))
        except Exception as exc:  # noqa: BLE001 - any failure is the folder's
            raise DataError(str(src.folder), f"cannot read this save_to_disk folder ({_last_line(exc)})",
                            "write it again with Dataset.save_to_disk") from None
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise DataError(str(src.folder), f"no split {split!r} (it has {', '.join(ds)})",
                                f"set data.split to one of: {', '.join(ds)}")
            ds = ds[split]
        if len(ds) == 0:
            raise DataError(str(src.folder), "the data set holds no rows", "point data.path at data")
        return ds.to_iterable_dataset(num_shards=max(1, min(64, len(ds)))) if streaming else ds
    if split != "train":
        raise DataError(src.where(), f"data.split = {split!r}, but local files form one split, 'train'",
                        "set data.split = 'train', or save a DatasetDict with save_to_disk and name its folder")
    for f in src.files:
        _check_file(f)
    try:
        ds = datasets.load_dataset(src.builder, data_files=[str(f) for f in src.files], split="train",
                                   streaming=streaming, **_builder_kwargs(src))
        if streaming:
            next(iter(ds))  # a stream is opened lazily: read one row now, so bad files fail here
    except DataError:
        raise
    except StopIteration:
        raise DataError(src.where(), "the data holds no rows", "point data.path at data") from None
    except Exception as exc:  # noqa: BLE001 - datasets/pyarrow wrap the cause in many types
        for f in src.files:
            diagnose_file(f, src.builder)
        raise DataError(src.where(), f"cannot read it as {src.builder} ({_last_line(exc)})",
                        "check the file's format matches its suffix") from None
    if not streaming and len(ds) == 0:
        raise DataError(src.where(), "the data holds no rows", "point data.path at data")
    return ds


def _last_line(exc: BaseException) -> str:
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    text = str(exc).strip().splitlines()
    return (type(exc).__name__ + ": " + text[-1][:200]) if text else type(exc).__name__


#: The largest row (one line of a JSON Lines, CSV or text file) tuner reads. Reading a row costs
#: many times its size (`datasets`' JSON reader, Python strings, the tokenizer): a 100 MB line
#: took 16 GB, about 160 times its size; at that rate an 8 MiB row costs about 1.3 GB (an estimate,
#: docs/reliability.md).
MAX_ROW_BYTES = 8 << 20
_CHUNK = 1 << 20


def longest_line(f: Path) -> tuple[int, int]:
    """(the line number, its size in bytes) of `f`'s longest line, read 1 MiB at a time."""
    best = (0, 0)
    line, current = 1, 0
    with open(f, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            parts = chunk.split(b"\n")
            for i, part in enumerate(parts):
                current += len(part)
                if current > best[1]:
                    best = (line, current)
                if i < len(parts) - 1:
                    line, current = line + 1, 0
    return best


def _check_row_sizes(f: Path, head: bytes) -> None:
    """Refuse a row too large to read, naming the file, the row and its size (before any rank
    reads it: every rank would pay it at once)."""
    suffix = f.suffix.lower()
    if BUILDERS.get(suffix) not in ("json", "csv", "text") or suffix == ".json" and head.lstrip()[:1] == b"[":
        return  # a JSON array is one document: datasets reads it whole, whatever its lines
    n, size = longest_line(f)
    if size > MAX_ROW_BYTES:
        raise DataError(f"{f}: line {n}", f"one row of {size / 1e6:.1f} MB (at most {MAX_ROW_BYTES >> 20} MiB per row: "
                        "reading a row costs many times its size)",
                        "split the document into rows of a few MB (e.g. by chapter or paragraph); "
                        "packing joins them again up to data.seq_len")


def _check_file(f: Path) -> None:
    """The checks every format shares: readable, not empty, UTF-8 (text formats), no row too
    large to read."""
    try:
        size = f.stat().st_size
        with open(f, "rb") as fh:
            head = fh.read(1 << 20)
    except OSError as exc:
        raise DataError(str(f), f"cannot read it ({exc.strerror or exc})", "check the path and its permissions") from None
    if size == 0:
        raise DataError(str(f), "the file is empty", "point data.path at a file holding data")
    if BUILDERS.get(f.suffix.lower()) in ("json", "csv", "text"):
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.start < len(head) - 4:  # not a character cut by the 1 MiB read
                line = head[: exc.start].count(b"\n") + 1
                raise DataError(f"{f}: line {line}", f"not UTF-8 text (byte 0x{head[exc.start]:02x})",
                                f"re-encode the file, e.g. `iconv -f latin1 -t utf-8 {f} > {f.stem}.utf8{f.suffix}`") from None
    _check_row_sizes(f, head)


def diagnose_file(f: Path, builder: str) -> None:
    """Raise a DataError naming the line of `f` that `datasets` could not read (JSON files);
    return when nothing more precise can be said."""
    import json
    import sys

    if builder != "json":
        return
    text = f.read_text(encoding="utf-8", errors="replace")
    stripped = text.lstrip()
    if f.suffix.lower() == ".json" and stripped.startswith("["):
        lines = [text]
    else:
        lines = text.splitlines()
    limit = sys.getrecursionlimit()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        depth = _depth(line)
        if depth > 100:
            raise DataError(f"{f}: line {n}", f"JSON nested {depth} levels deep (at most 100 are read)",
                            "write one flat JSON object per line") from None
        try:
            sys.setrecursionlimit(max(limit, 10_000))
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            msg = getattr(exc, "msg", "too deeply nested")
            raise DataError(f"{f}: line {n}", f"not valid JSON ({msg})",
                            "write one JSON object per line (JSONL), e.g. {\"text\": \"...\"}") from None
        finally:
            sys.setrecursionlimit(limit)
        if f.suffix.lower() == ".jsonl" and not isinstance(item, dict):
            raise DataError(f"{f}: line {n}", f"each line must be a JSON object, not {type(item).__name__}",
                            "write one JSON object per line, e.g. {\"text\": \"...\"}")


def _depth(text: str) -> int:
    depth = best = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    return best
