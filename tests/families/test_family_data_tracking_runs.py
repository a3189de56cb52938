"""Two real `tuner run`s on two gloo ranks, as a user would start them:

* diffusion (FSDP2) on a Hugging Face imagefolder (images + metadata.jsonl with a ``text``
  column) with caption dropout; the export loads with ``DiffusionPipeline.from_pretrained``
  and samples one step on CPU;
* a causal LM (FSDP2) logging to TensorBoard through [logging] log_with: the event files
  hold the loss of every log step, equal to metrics.jsonl's; the progress, off a terminal,
  is one plain line per log step with loss, tokens/s (tok/s), learning rate and ETA.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
from families_helpers import run_example

from tuner.runtime.data_sources.image_sets import DATA_DIR

pytestmark = pytest.mark.slow

FSDP2 = ("deepspeed.enabled=false", "fsdp.enabled=true", "fsdp.version=2")


def test_diffusion_on_an_imagefolder_with_metadata_exports_a_loadable_pipeline(tmp_path):
    from diffusers import DiffusionPipeline

    imgs = tmp_path / "imgs"
    imgs.mkdir()
    captions = {}
    for line in (DATA_DIR / "captions.jsonl").read_text().splitlines():
        item = json.loads(line)
        shutil.copy(DATA_DIR / item["file"], imgs / item["file"].split("/")[-1])
        captions[item["file"].split("/")[-1]] = item["caption"]
    (imgs / "metadata.jsonl").write_text(
        "".join(json.dumps({"file_name": n, "text": c}) + "\n" for n, c in captions.items()))
    run = run_example("diffusion_unet.toml", tmp_path, *FSDP2, "data.path=imgs", "data.caption_dropout=0.1",
                      "training.max_steps=4", "training.validation_every=0", "training.ema=false",
                      "checkpoint.every_steps=0").check()
    assert "empty caption" not in run.output
    assert len(run.losses()) == 4
    final = run.out / "final"
    assert json.loads((final / "model_index.json").read_text())["_class_name"] == ["tuner_pipeline", "TunerPipeline"]
    pipe = DiffusionPipeline.from_pretrained(str(final), trust_remote_code=True)
    images = pipe(next(iter(captions.values())), num_inference_steps=1, output_type="pt")
    assert tuple(images.shape) == (1, 3, 16, 16) and torch.isfinite(images).all()


def test_causal_lm_logs_every_step_to_tensorboard_and_prints_plain_progress(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps = 4
    run = run_example("fsdp2.toml", tmp_path, f"training.max_steps={steps}", "checkpoint.every_steps=0",
                      "checkpoint.export=false", "logging.log_with=tensorboard", "logging.project=tiny").check()
    losses = run.losses()
    assert sorted(losses) == list(range(1, steps + 1))
    events = list((run.out / "logs" / "tiny").rglob("events.out.tfevents.*"))
    logged = {}
    for folder in {p.parent for p in events}:
        ea = EventAccumulator(str(folder))
        ea.Reload()
        if "loss" in ea.Tags()["scalars"]:
            logged = {e.step: e.value for e in ea.Scalars("loss")}
    assert logged == {s: pytest.approx(v, rel=1e-6) for s, v in losses.items()}
    lines = [ln for ln in run.proc.stderr.splitlines() if re.match(r"step \d+/", ln)]
    assert len(lines) == steps, run.output[-3000:]
    assert re.fullmatch(r"step 4/4 loss \d+\.\d{4} lr \d\.\d\de[-+]\d\d tok/s \d+ eta 0:00:00", lines[-1]), lines
    assert "trackers: tensorboard" in run.output
