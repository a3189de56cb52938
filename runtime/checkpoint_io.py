"""How a checkpoint's bytes reach the disk: the setting tuner adds around the libraries' own
save (accelerate's ``save_state``, DeepSpeed's writer underneath), measured by
bench/checkpoint_speed.py.

* `quick_save`: ``torch.save`` computes a CRC-32 of every record it writes (its zip format),
  and ``torch.load`` never checks it (torch.serialization.set_crc32_options: "torch.load will
  be able to load the file"; a flipped byte in a tensor loads without error either way). The
  checksum costs about half of a ``torch.save`` on this machine (optimizer.bin, the larger
  part of a checkpoint), so saves skip it. A damaged file is still found by tuner's own
  record (`checkpoint.file_sizes`) and by the loaders' format checks, as before (a zip tool's
  own test, ``unzip -t``, would now report the records' checksums as wrong).

Tried for the load and not kept (no faster in bench/checkpoint_speed.py on this machine): the
checkpoint's files read ahead by the kernel (``posix_fadvise(WILLNEED)``) or by a thread in
16 MiB blocks while ``load_state`` runs. The load is bound by the loaders' CPU work (copying
into the parameters, ``torch.load``'s record reads), not by the disk: see docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def quick_save() -> Iterator[None]:
    """``torch.save`` without its CRC-32 inside (restored after)."""
    import torch.serialization as ts

    before = ts.get_crc32_options()
    ts.set_crc32_options(False)
    try:
        yield
    finally:
        ts.set_crc32_options(before)
