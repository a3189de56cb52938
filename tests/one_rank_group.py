"""A one-rank gloo process group inside the test process, for tests that call torch.distributed
or DeepSpeed in-process. The default group is per process, and a pytest worker runs many test
files: an earlier test's one-rank group (the compiler tests start one for DeepSpeedConfig and
keep it, runtime/verify.py) serves as well, and a group made here is destroyed here."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def one_rank_group(tmp_path):
    import torch.distributed as dist

    if dist.is_initialized():
        assert dist.get_world_size() == 1
        yield
        return
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
