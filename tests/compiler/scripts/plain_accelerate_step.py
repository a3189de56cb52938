"""A plain accelerate training script, as accelerate's examples write one; no tuner import.

Run under the environment `accelerate launch --config_file build/accelerate.yaml` derives.
The optimizer is a torch optimizer built in code, unless deepspeed.json names one: then
accelerate's DummyOptim pattern (its `deepspeed_with_config_support.py` example), with the
LR schedule built in code through `DummyScheduler(lr_scheduler_callable=...)` when the JSON
names no scheduler (what the HF Trainer does). Prints one JSON line describing the step.

`--torch-optimizer`: a torch optimizer whatever the JSON says. `--torch-optimizer-first`: before
the above, the script offers accelerate a torch optimizer beside the JSON's optimizer block
(`prepare(model, AdamW)`) and records accelerate's refusal (its check runs before DeepSpeed
starts: nothing is prepared), then goes on as above: one process shows both.
"""

import json
import sys

import torch
from accelerate import Accelerator
from accelerate.utils import DummyOptim, DummyScheduler
from transformers import get_scheduler


def main() -> None:
    force_torch_optimizer = sys.argv[1:] == ["--torch-optimizer"]
    torch_optimizer_first = sys.argv[1:] == ["--torch-optimizer-first"]
    acc = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    data = torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randn(32, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    ds_config = acc.state.deepspeed_plugin.deepspeed_config if acc.state.deepspeed_plugin else {}
    schedule = lambda opt: get_scheduler("linear", opt, num_warmup_steps=1, num_training_steps=10)  # noqa: E731
    refused = None
    if torch_optimizer_first:
        try:
            acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
            refused = ""  # accepted
        except ValueError as exc:
            refused = str(exc)
    if "optimizer" in ds_config and not force_torch_optimizer:
        opt = DummyOptim(model.parameters(), lr=1e-3)
        if "scheduler" in ds_config:
            sched = DummyScheduler(opt, total_num_steps=10, warmup_num_steps=1)
        else:
            sched = DummyScheduler(opt, lr_scheduler_callable=schedule)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        sched = schedule(opt)
    model, opt, loader, sched = acc.prepare(model, opt, loader, sched)
    x, y = next(iter(loader))
    # Under DeepSpeed bf16/fp16 the weights are half precision and nothing casts float inputs
    # (accelerate's examples feed token ids): a script casts them itself.
    dtype = next(model.parameters()).dtype
    loss = torch.nn.functional.mse_loss(model(x.to(dtype)).float(), y)
    acc.backward(loss)
    opt.step()
    sched.step()
    opt.zero_grad()
    inner = opt
    while hasattr(inner, "optimizer"):  # accelerate's wrapper, DeepSpeed's ZeRO optimizer, the base one
        inner = inner.optimizer
    print(json.dumps({"ok": True, "distributed_type": acc.distributed_type.name, "loss": float(loss),
                      "optimizer": type(inner).__name__, "torch_optimizer_refused": refused,
                      "train_batch_size": acc.deepspeed_config["train_batch_size"] if ds_config else None}))


if __name__ == "__main__":
    main()
