"""Embedding family on real gloo ranks through `tuner run`: all-MiniLM-L6-v2 fine-tuned under
FSDP2 (full and LoRA) beats the untrained model on held-out recall@1, its export loads with
from_pretrained and embeds like the trained model, and the contrastive negatives come from
the global batch (2 ranks x 4 pairs == 1 process x 8 pairs, loss and update)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from families_helpers import run_example
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

STEPS = 12
FAST = (f"training.max_steps={STEPS}", "training.validation_every=0")


def _baseline_recall() -> tuple[float, list[dict]]:
    """Held-out recall@1 of the untrained packaged model, on the split the runs use."""
    from tuner.compiler.keys.settings import Settings
    from tuner.runtime.data_sources.driver import rank_data
    from tuner.runtime.families.base import FamilyContext
    from tuner.runtime.families.embedding.evaluate import evaluate_retrieval
    from tuner.runtime.families.embedding.family import EmbeddingFamily

    s = Settings.from_dict({"model": {"family": "embedding", "path": "builtin:all-minilm-l6-v2"},
                            "data": {"seq_len": 32, "validation_split": 0.4}})
    fam = EmbeddingFamily(FamilyContext(settings=s, base_dir=Path("."), seed=s.training.seed))
    val = rank_data(fam).val
    return evaluate_retrieval(fam.build_model(), fam.tokenizer(), val.rows, 32)["recall@1"], val.rows


@pytest.fixture(scope="module")
def baseline():
    return _baseline_recall()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("embedding")
    return {
        "full": run_example("embedding_minilm.toml", root / "full", *FAST),
        "lora": run_example("embedding_minilm_lora.toml", root / "lora", *FAST),
    }


@pytest.mark.parametrize("name", ["full", "lora"])
def test_minilm_improves_held_out_recall(runs, baseline, name):
    run = runs[name].check()
    assert "FSDP" in run.output and "2 rank(s)" in run.output
    base, _ = baseline
    trained = run.last("recall@1")
    assert trained > base + 0.02, f"{name}: recall@1 {trained:.3f} vs untrained {base:.3f}"
    if name == "lora":
        assert "trainable" in run.output
        assert (run.out / "final" / "adapter" / "adapter_config.json").is_file()


@pytest.mark.parametrize("name", ["full", "lora"])
def test_export_loads_and_embeds_like_the_trained_model(runs, baseline, name):
    from transformers import AutoModel, AutoTokenizer
    from tuner.runtime.families.embedding.evaluate import encode
    from tuner.runtime.families.embedding.model import EmbeddingModel

    run = runs[name].check()
    final = run.out / "final"
    model = EmbeddingModel(AutoModel.from_pretrained(str(final)), "mean").eval()
    tok = AutoTokenizer.from_pretrained(str(final))
    _, rows = baseline
    # the trained (sharded) model's held-out embeddings, written at the final validation
    saved = load_file(str(run.out / "validation" / f"step-{STEPS}" / "embeddings.safetensors"))
    n = 24  # enough rows to compare; the validation wrote them in the split's order
    q = encode(model, tok, [r["query"] for r in rows[:n]], seq_len=32, batch_size=8)
    torch.testing.assert_close(q, saved["queries"][:n], rtol=1e-4, atol=1e-4)


def test_negatives_come_from_the_global_batch(tmp_path):
    """2 ranks x 4 pairs and 1 process x 8 pairs see the same 8 pairs per step; with the
    negatives gathered across ranks, the step losses agree, before and after an SGD update."""
    common = ("model.path=builtin:tiny-bert", "model.type=full", "training.max_steps=3", "training.optimizer=sgd",
              "training.learning_rate=0.5", "training.validation_every=0", "data.validation_split=0",
              "checkpoint.export=false", "training.max_grad_norm=0")
    two = run_example("embedding_minilm_lora.toml", tmp_path / "two", *common, "hardware.num_processes=2",
                      "training.micro_batch_size=4").check()
    one = run_example("embedding_minilm_lora.toml", tmp_path / "one", *common, "hardware.num_processes=1",
                      "fsdp.enabled=false", "training.micro_batch_size=8").check()
    l2, l1 = two.losses(), one.losses()
    assert sorted(l2) == sorted(l1) == [1, 2, 3]
    for step in (1, 2, 3):
        assert l2[step] == pytest.approx(l1[step], rel=1e-4), (step, l2, l1)
    assert l1[3] != pytest.approx(l1[1], rel=1e-3)  # the updates did something
