"""A DeepSpeed ZeRO checkpoint's model state, read piecewise for the streamed export.

* ZeRO-3: DeepSpeed's own ``get_fp32_state_dict_from_zero_checkpoint(lazy_mode=True)``, which
  gathers one parameter at a time from every rank's memory-mapped partition (`Zero3Source`).
* ZeRO-1 and ZeRO-2 (`Zero12Source`): DeepSpeed's reader cannot do that there. Its
  ``_zero2_merge_trainable_params`` concatenates every rank's fp32 partition of a parameter group
  into one vector (its comment: "memory usage doubles here (zero2)"), and its
  ``parse_model_states`` loads ``mp_rank_00_model_states.pt`` whole, whose ``module`` holds the
  full model again. Here both files are opened with ``torch.load(mmap=True)`` (so nothing is
  read until touched) and each parameter is cut out of the rank slices as DeepSpeed 0.19's
  ``deepspeed/utils/zero_to_fp32.py`` lays them out (read there, same names):

  - ``param_shapes`` (one ordered mapping per parameter group, from the model states) gives
    the parameters of a group in the order they sit in the group's flat vector;
  - the flat vector of group g is ``torch.cat`` of ``single_partition_of_fp32_groups[g]`` of
    the ranks' ``*_optim_states.pt`` in ``get_optim_files``' natural order (rank 0 first);
  - a parameter takes ``numel`` elements from the running offset, then the offset moves on by
    its ``param_alignment_paddings[g][i]`` when the checkpoint records them (newer DeepSpeed);
  - after the last parameter, the offset and the flat length, both rounded up to a multiple of
    ``2 * world_size`` (``zero2_align``), must be equal ("consumed ... numels out of ...");
  - buffers come from the model states' ``module`` (``buffer_names``), floating ones as fp32
    (``parse_model_states``); frozen parameters from ``frozen_param_fragments`` as saved
    (``_zero2_merge_frozen_params``); ``shared_params`` pairs name the same tensor twice;
  - the names come in DeepSpeed's order: buffers, frozen, trainable, shared.

  Reading a parameter copies only its own elements from the slices it spans (one or two
  ranks' partitions); the pages read are dropped again at once (`drop_pages`), so the resident
  set holds the shard being written and little else.
"""

from __future__ import annotations

import math
from itertools import accumulate
from pathlib import Path
from typing import Any

from .export_sources import Source, _file_backed, drop_pages


class Zero3Source(Source):
    def __init__(self, path: Path) -> None:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        self.state = get_fp32_state_dict_from_zero_checkpoint(str(path), lazy_mode=True)
        self.shapes = {k: (tuple(v.shape), v.dtype) for k, v in self.state.items()}
        flats = {flat.data_ptr(): flat for lazy in self.state.values()  # ZeRO-3's partitions, one per rank and group
                 for per_rank in getattr(lazy, "flat_groups", ()) for flat in per_rank}
        self.mapped = [flat for flat in flats.values() if _file_backed(flat, "optim_states.pt")]

    def load(self, names):
        out = {}
        for n in names:  # each parameter gathered from every rank's partition, then those pages dropped
            out[n] = self.state[n].contiguous()
            self.release()
        return out

    def release(self) -> None:
        for flat in self.mapped:
            drop_pages(flat)


def tag_dir(path: Path) -> Path:
    """The folder DeepSpeed's reader reads: the tag the checkpoint's ``latest`` file names."""
    latest = path / "latest"
    if not latest.is_file():
        raise ValueError(f"Unable to find 'latest' file at {latest}")
    found = path / latest.read_text().strip()
    if not found.is_dir():
        raise FileNotFoundError(f"Directory '{found}' doesn't exist")
    return found


def _load_mapped(path: str) -> Any:
    import torch

    # weights_only=False as DeepSpeed's own reader: the files pickle DeepSpeed's objects
    # (its loss scaler, its ZeRO stage enum); mmap=True: no tensor is read until touched.
    return torch.load(path, map_location="cpu", mmap=True, weights_only=False)


def open_zero(path: Path) -> Source:
    """The piecewise reader of a DeepSpeed checkpoint folder (any ZeRO stage)."""
    from deepspeed.checkpoint.constants import OPTIMIZER_STATE_DICT, ZERO_STAGE
    from deepspeed.utils.zero_to_fp32 import get_optim_files

    ds_dir = tag_dir(path)
    files = get_optim_files(str(ds_dir))
    first = _load_mapped(files[0])[OPTIMIZER_STATE_DICT]
    if ZERO_STAGE not in first:
        raise ValueError(f"{files[0]} is not a zero checkpoint")
    if int(first[ZERO_STAGE]) >= 3:
        return Zero3Source(path)
    return Zero12Source(ds_dir, files)


class Zero12Source(Source):
    def __init__(self, ds_dir: Path, optim_files: list[str]) -> None:
        from deepspeed.checkpoint import constants as c
        from deepspeed.utils import zero_to_fp32 as z

        model = _load_mapped(z.get_model_state_file(str(ds_dir), 2))
        if c.BUFFER_NAMES not in model:
            raise ValueError(f"{ds_dir} is not a model state checkpoint")
        optim = [_load_mapped(f)[c.OPTIMIZER_STATE_DICT] for f in optim_files]
        world = optim[0][c.PARTITION_COUNT]
        world = max(world) if isinstance(world, list) else world
        if world != len(optim_files):
            raise ValueError(f"Expected {world} of '*_optim_states.pt' under '{ds_dir}' but found "
                             f"{len(optim_files)} files")
        #: group -> one fp32 slice per rank (memory-mapped), and where each slice starts in the group
        self.flats = [[o[c.SINGLE_PARTITION_OF_FP32_GROUPS][g] for o in optim] for g in range(len(model[c.PARAM_SHAPES]))]
        self.starts = [[0, *accumulate(t.numel() for t in ranks)] for ranks in self.flats]
        self.buffers = {k: v.float() if v.is_floating_point() else v
                        for k, v in model["module"].items() if k in model[c.BUFFER_NAMES]}
        fragments = model.get(c.FROZEN_PARAM_FRAGMENTS)
        self.frozen = {n: fragments[n] for n in model.get(c.FROZEN_PARAM_SHAPES) or {}}
        self.pieces = self._lay_out(model[c.PARAM_SHAPES], optim[0].get(c.PARAM_ALIGNMENT_PADDINGS), world)
        self.alias = {a: b for a, b in model["shared_params"].items()}
        self.shapes = {k: (tuple(v.shape), v.dtype) for k, v in {**self.buffers, **self.frozen}.items()}
        self.shapes.update({k: (shape, self.flats[g][0].dtype) for k, (g, _, shape) in self.pieces.items()})
        for a, b in self.alias.items():
            if b in self.shapes:
                self.shapes[a] = self.shapes[b]
        self.mapped = [t for ranks in self.flats for t in ranks if _file_backed(t, "optim_states.pt")]
        self.mapped += [t for t in self.frozen.values() if _file_backed(t, "model_states.pt")]
        self.mapped_ids = {id(t) for t in self.mapped}

    def _lay_out(self, param_shapes: list, paddings: list | None, world: int) -> dict[str, tuple[int, int, tuple]]:
        """name -> (group, offset in the group's flat vector, shape), by DeepSpeed's rules (above)."""
        pieces = {}
        align = 2 * world
        for g, shapes in enumerate(param_shapes):
            pads = paddings[g] if paddings is not None else None
            if pads is not None and len(pads) != len(shapes):
                raise ValueError(f"Expected {len(shapes)} parameter alignment paddings for group {g}, "
                                 f"but found {len(pads)}")
            offset = 0
            for i, (name, shape) in enumerate(shapes.items()):
                pieces[name] = (g, offset, tuple(shape))
                offset += math.prod(shape) + (pads[i] if pads is not None else 0)
            avail = self.starts[g][-1]
            if align * math.ceil(offset / align) != align * math.ceil(avail / align):
                raise ValueError(f"consumed {offset} numels out of {avail} - something is wrong")
        return pieces

    def _cut(self, name: str) -> Any:
        import torch

        g, start, shape = self.pieces[name]
        end = start + math.prod(shape)
        if end > self.starts[g][-1]:
            raise ValueError(f"{name} runs past the end of parameter group {g}'s partitions")
        out = torch.empty(end - start, dtype=self.flats[g][0].dtype)
        for flat, lo, hi in zip(self.flats[g], self.starts[g], self.starts[g][1:], strict=False):
            a, b = max(start, lo), min(end, hi)
            if a < b:  # the part of the parameter this rank's slice holds
                piece = flat[a - lo:b - lo]
                out[a - start:b - start].copy_(piece)
                if id(flat) in self.mapped_ids:
                    drop_pages(piece)
        return out.view(shape)

    def load(self, names):
        out = {}
        for n in names:
            k = self.alias.get(n, n)
            if k in self.pieces:
                out[n] = self._cut(k)
            elif k in self.frozen:
                out[n] = self.frozen[k].contiguous()
            else:
                out[n] = self.buffers[k].contiguous()
        return out

    def release(self) -> None:
        for t in self.mapped:
            drop_pages(t)

