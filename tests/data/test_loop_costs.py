"""What keeps `tuner run`'s step as cheap as trl's (bench/sft_throughput.py; docs/benchmarks.md):
the person's thread count reaches the ranks, no host sync per micro-batch for token counts,
rows fetched a micro-batch at a time, torch's fused AdamW. No ranks launched."""

from __future__ import annotations


def test_the_persons_omp_num_threads_reaches_cpu_ranks(monkeypatch):
    from tuner.runtime.launch import rank_threads

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert rank_threads(1) == {}  # kept: the ranks inherit 1, not cores / ranks
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert int(rank_threads(1)["OMP_NUM_THREADS"]) >= 1


def test_collated_token_counts_are_ints_and_rows_come_a_batch_at_a_time():
    from datasets import Dataset
    from tuner.runtime.data_sources.packing import collate_rows
    from tuner.runtime.data_sources.rows import RowsDataset

    rows = RowsDataset(Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5]], "labels": [[1, 2, 3], [4, 5]],
                                          "position_ids": [[0, 1, 2], [0, 1]], "real": [[3], [2]]}), packed=False)
    samples = rows.__getitems__([1, 0])
    assert [s["input_ids"] for s in samples] == [[4, 5], [1, 2, 3]]
    batch = collate_rows(samples, pad_id=0, packed=False)
    assert batch["n_real"] == 5 and isinstance(batch["n_real"], int)  # never moved to a device


def test_adamw_is_torch_fused_kernel():
    from types import SimpleNamespace

    import torch
    from tuner.runtime.optim import optimizer_and_scheduler

    t = SimpleNamespace(learning_rate=1e-3, weight_decay=0.0, optimizer="adamw", lr_scheduler="constant",
                        warmup_steps=0, warmup_ratio=0.0)
    param = torch.nn.Parameter(torch.ones(3))
    opt, _ = optimizer_and_scheduler([param], t, {}, 10, 1)
    assert opt.defaults["fused"] is True
    param.grad = torch.ones(3)
    opt.step()  # the kernel runs on this device
    assert torch.all(param < 1)
