"""A checkpoint's model state, read piecewise: the tensors one output shard needs, then the next.

`tuner checkpoint export` writes a model shard by shard (`export_shards.py`); each `Source`
here names every tensor of the full state dict (the names `export.full_state_dict` gives) with
its shape and dtype without reading it, and `load(names)` reads only those, through the
libraries' own readers:

* DDP ``model.safetensors``: safetensors' ``safe_open``, one tensor at a time.
* FSDP full ``pytorch_model_fsdp.bin`` (and ``pytorch_model.bin``): ``torch.load(mmap=True)``,
  so a tensor is read from the file only when a shard writes it.
* FSDP sharded (DCP ``pytorch_model_fsdp_0/``): ``torch.distributed.checkpoint``'s
  ``FileSystemReader`` metadata, and ``dcp.load`` of just those keys (no process group).
* DeepSpeed ZeRO: `export_zero.py` (one parameter at a time from the memory-mapped
  partitions, every stage).
"""

from __future__ import annotations

import ctypes
import mmap
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: Where accelerate writes an FSDP sharded model (a DCP folder) and its key prefix there.
DCP_DIR, DCP_KEY = "pytorch_model_fsdp_0", "model"
FULL_BINS = ("pytorch_model_fsdp.bin", "pytorch_model_fsdp_0.bin", "pytorch_model.bin")


class Source:
    """Every tensor of a checkpoint's model: `shapes` (name -> (shape, dtype)), `load(names)`."""

    shapes: dict[str, tuple[tuple[int, ...], Any]]

    def load(self, names: Iterable[str]) -> dict[str, Any]:
        raise NotImplementedError

    def release(self) -> None:
        """Give back what reading the last shard kept mapped (nothing by default)."""


class SafetensorsSource(Source):
    def __init__(self, path: Path) -> None:
        from safetensors import safe_open

        self.path = str(path)
        with safe_open(self.path, "pt") as f:
            self.shapes = {k: (tuple(f.get_slice(k).get_shape()), _dtype(f.get_slice(k).get_dtype()))
                           for k in f.keys()}

    def load(self, names):
        from safetensors import safe_open

        out = {}
        for name in names:  # one mapping per tensor: only its pages are ever mapped at once
            with safe_open(self.path, "pt") as f:
                out[name] = f.get_tensor(name)
        return out


def _dtype(name: str) -> Any:
    """torch's dtype of a safetensors dtype name ("F32", "BF16", ...)."""
    import torch

    return {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
            "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
            "BOOL": torch.bool}[name]


class TorchSaveSource(Source):
    def __init__(self, path: Path) -> None:
        self.path = path
        state = self._open()
        self.shapes = {k: (tuple(v.shape), v.dtype) for k, v in state.items()}

    def _open(self) -> dict:
        import torch

        return torch.load(self.path, map_location="cpu", weights_only=True, mmap=True)

    def load(self, names):
        state = self._open()  # a new mapping per shard: the last one's pages leave with it
        return {n: state[n] for n in names}


class DCPSource(Source):
    def __init__(self, folder: Path) -> None:
        from torch.distributed.checkpoint import FileSystemReader
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        self.folder = str(folder)
        meta = FileSystemReader(self.folder).read_metadata()
        prefix = DCP_KEY + "."
        self.shapes = {k[len(prefix):]: (tuple(m.size), m.properties.dtype)
                       for k, m in meta.state_dict_metadata.items()
                       if k.startswith(prefix) and isinstance(m, TensorStorageMetadata)}

    def load(self, names):
        import torch
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import FileSystemReader

        want = {n: torch.empty(self.shapes[n][0], dtype=self.shapes[n][1]) for n in names}
        with warnings.catch_warnings():  # "torch.distributed is disabled ...": no group, by design
            warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
            dcp.load({DCP_KEY: want}, storage_reader=FileSystemReader(self.folder), no_dist=True)
        return want


def _file_backed(tensor: Any, suffix: str) -> bool:
    """Whether `tensor` lies inside this process's mapping of a file whose name ends with `suffix`
    (/proc/self/maps): the only memory `drop_pages` may be used on."""
    start = tensor.data_ptr()
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if lo <= start < hi:
            return len(parts) >= 6 and parts[-1].endswith(suffix)
    return False


def drop_pages(tensor: Any) -> None:
    """Tell the kernel this process no longer needs the pages of a tensor read from a
    memory-mapped file (``MADV_DONTNEED`` on the whole pages inside it): they leave the
    resident set and are read again from the file if touched. Only for file-backed, unwritten
    tensors (a private anonymous page would lose its contents)."""
    page = mmap.PAGESIZE
    start, end = tensor.data_ptr(), tensor.data_ptr() + tensor.numel() * tensor.element_size()
    first, last = -(-start // page) * page, end // page * page
    if last > first:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), 4)  # MADV_DONTNEED


def open_source(path: Path) -> Source | None:
    """The piecewise reader of a (not DeepSpeed) checkpoint folder's model state; None when it
    holds none."""
    if (path / DCP_DIR).is_dir():
        return DCPSource(path / DCP_DIR)
    for name in FULL_BINS[:2]:  # the order `export.full_state_dict` reads them in
        if (path / name).is_file():
            return TorchSaveSource(path / name)
    if (path / "model.safetensors").is_file():
        return SafetensorsSource(path / "model.safetensors")
    if (path / FULL_BINS[2]).is_file():
        return TorchSaveSource(path / FULL_BINS[2])
    return None
