"""`RowsDataset`: a language model's training rows (a `datasets.Dataset` of packed or padded
rows) as the map-style dataset the trainer's DataLoader reads."""

from __future__ import annotations

from typing import Any


class RowsDataset:
    """Map-style training rows (a `datasets.Dataset` of packed or padded rows)."""

    def __init__(self, rows: Any, packed: bool) -> None:
        self.ds, self.packed = rows, packed

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.ds[int(i)]

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        """A micro-batch's rows in one read of the Arrow table (torch's DataLoader asks for
        them this way when the method exists), not one read per row."""
        return self.ds.__getitems__([int(i) for i in indices])

    @property
    def rows(self):
        """The input ids of every row as one 2-D tensor (packed rows all have seq_len tokens)."""
        import torch

        return torch.tensor(self.ds["input_ids"], dtype=torch.long)
