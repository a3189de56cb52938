"""What every seeded fault script shares: a tiny regression model and its data, built
locally (no tuner import, nothing downloaded). Each fault script is a plain accelerate
script of a few steps that exits 0 and trains the wrong way in one respect."""

import torch

STEPS, BATCH = 3, 8


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))


def dataset(world: int = 2, batch: int = BATCH, nan: bool = False, steps: int = STEPS):
    g = torch.Generator().manual_seed(1)
    n = steps * batch * world
    x = torch.randn(n, 16, generator=g)
    y = x @ torch.linspace(-1, 1, 16).unsqueeze(1)
    if nan:
        y[::7] = float("nan")
    return torch.utils.data.TensorDataset(x, y)


def loader(batch: int = BATCH, **kw):
    torch.manual_seed(0)  # the same shuffle on every rank, as a seeded script has it
    return torch.utils.data.DataLoader(dataset(batch=batch, **kw), batch_size=batch, shuffle=True)


def loss_fn(m, xb, yb):
    return torch.nn.functional.mse_loss(m(xb), yb)


#: What the "settings model" scripts share with their build's settings (tests/check/test_rehearsal.py
#: SETTINGS_MODEL): the model's config.json in ./model, the learning rate and its schedule.
LR, WARMUP, MAX_STEPS = 1e-3, 0, 6


def settings_model():
    """The build's own model (./model/config.json), as a script loads it with transformers."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained("model"))


def token_loader(batch: int = BATCH, world: int = 2, steps: int = STEPS):
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 512, (steps * batch * world, 16), generator=g)
    torch.manual_seed(0)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=batch, shuffle=True)


def settings_schedule(opt):
    from transformers import get_scheduler

    return get_scheduler("linear", opt, num_warmup_steps=WARMUP, num_training_steps=MAX_STEPS)
