"""Fast checks of the family building blocks (no ranks): pooling, losses, targets, buckets,
EMA persistence, and that every family example compiles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tuner.runtime.data_sources import image_sets as diffusion_data
from tuner.runtime.families.diffusion.ema import EMA
from tuner.runtime.families.diffusion.family import DiffusionFamily
from tuner.runtime.data_sources.images import read_image_folder
from tuner.runtime.data_sources.pairs import PairCollator, read_pairs
from tuner.runtime.families.embedding.evaluate import retrieval_metrics
from tuner.runtime.families.embedding.loss import contrastive_loss
from tuner.runtime.families.embedding.model import pool
from tuner.runtime.families.text import build_tiny_tokenizer

from tests import harness

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FAMILY_EXAMPLES = sorted(p.name for p in EXAMPLES.glob("diffusion_*.toml")) + sorted(
    p.name for p in EXAMPLES.glob("embedding_*.toml"))


def test_pooling_modes():
    h = torch.arange(2 * 3 * 2, dtype=torch.float32).view(2, 3, 2)
    m = torch.tensor([[1, 1, 0], [1, 1, 1]])
    torch.testing.assert_close(pool(h, m, "cls"), h[:, 0])
    torch.testing.assert_close(pool(h, m, "last"), torch.stack([h[0, 1], h[1, 2]]))
    torch.testing.assert_close(pool(h, m, "mean"), torch.stack([h[0, :2].mean(0), h[1].mean(0)]))


def test_retrieval_metrics():
    q = torch.eye(3)
    p = torch.tensor([[1.0, 0, 0], [0, 0, 1.0], [0, 1.0, 0]])
    m = retrieval_metrics(q, p)
    assert m["recall@1"] == pytest.approx(1 / 3)
    assert m["mrr"] == pytest.approx((1 + 0.5 + 0.5) / 3)


def test_contrastive_loss_matryoshka_and_hard_negatives():
    torch.manual_seed(0)
    emb = torch.randn(4 * 3, 16)  # 4 queries, 4 positives, 4 hard negatives
    full = contrastive_loss(emb, 4, 1, 0.1)
    mrl = contrastive_loss(emb, 4, 1, 0.1, dims=[16, 8])
    eight = contrastive_loss(emb[:, :8], 4, 1, 0.1)
    assert mrl == pytest.approx(((full + eight) / 2).item())
    with pytest.raises(ValueError):
        contrastive_loss(emb, 4, 1, 0.1, dims=[32])


def test_pairs_collate_stacks_queries_positives_negatives():
    tok = build_tiny_tokenizer()
    rows = [{"query": "a", "positive": "b", "negatives": ["c"]}, {"query": "d", "positive": "e", "negatives": ["f"]}]
    batch = PairCollator(tok, 16)(rows)
    assert batch["input_ids"].shape[0] == 6 and int(batch["num_negatives"]) == 1
    assert len(read_pairs("builtin")) >= 200


def test_scheduler_targets():
    from diffusers import DDPMScheduler, FlowMatchEulerDiscreteScheduler
    from tuner.compiler.keys.settings import Settings
    from tuner.runtime.families.base import FamilyContext

    fam = DiffusionFamily(FamilyContext(settings=Settings.from_dict({"model": {"family": "diffusion"}}),
                                          base_dir=Path(".")))
    x0 = torch.randn(2, 3, 8, 8)
    for pred in ("epsilon", "v_prediction", "sample"):
        fam._scheduler = DDPMScheduler(prediction_type=pred)
        g = torch.Generator().manual_seed(0)
        noisy, t, target, _ = fam.noisy_inputs(x0, g)
        noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(0))
        expect = {"epsilon": noise, "sample": x0,
                  "v_prediction": fam._scheduler.get_velocity(x0, noise, t)}[pred]
        torch.testing.assert_close(target, expect)
    fam._scheduler = FlowMatchEulerDiscreteScheduler()
    noisy, t, target, _ = fam.noisy_inputs(x0, torch.Generator().manual_seed(0))
    assert float(t.max()) <= 1000 and torch.allclose(target, (noisy - x0) / (t / 1000).view(-1, 1, 1, 1), atol=1e-4)


def test_buckets_and_bundled_images():
    b = diffusion_data.bucket_sizes(32)
    assert (32, 32) in b and all(w % 8 == 0 and h % 8 == 0 for w, h in b)
    assert diffusion_data.bucket_for((64, 48), 32) == (40, 24)  # 4:3 at about 32² pixels (SimpleTuner's area)
    assert diffusion_data.bucket_for((48, 64), 32) == (24, 40) and diffusion_data.bucket_for((50, 50), 32) == (32, 32)
    assert diffusion_data.bucket_for((1000, 100), 32, 8) == (104, 8)  # a side never below one multiple
    rows = read_image_folder(diffusion_data.DATA_DIR)
    assert len(rows) >= 30 and all(r["caption"] for r in rows)
    size = sum(p.stat().st_size for p in diffusion_data.DATA_DIR.rglob("*") if p.is_file())
    assert size < 500_000


def test_ema_update_save_load(tmp_path):
    lin = torch.nn.Linear(3, 2)
    ema = EMA(lin.named_parameters(), decay=0.5)
    start = [s.clone() for s in ema.shadows]
    with torch.no_grad():
        lin.weight.add_(1.0)
    ema.update()
    d = min(0.5, 1 / 10)
    torch.testing.assert_close(ema.shadows[0], start[0] * d + lin.weight.detach() * (1 - d))
    ema.save(tmp_path, rank=0, world_size=1)
    other = EMA(torch.nn.Linear(3, 2).named_parameters(), decay=0.9)
    other.load(tmp_path, rank=0, world_size=1)
    assert other.num_updates == 1 and other.decay == 0.5
    torch.testing.assert_close(other.shadows[0], ema.shadows[0])
    assert json.loads((tmp_path / "ema" / "ema.json").read_text())["sharded"] is False


@pytest.mark.parametrize("example", FAMILY_EXAMPLES)
def test_family_examples_compile(example, tmp_path):
    proc = harness.tuner('compile', str(EXAMPLES / example), '--out', str(tmp_path / 'build'), '--set', 'hardware.platform=cpu')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "build" / "manifest.json").is_file()


def test_lora_example_compiles_under_deepspeed(tmp_path):
    proc = harness.tuner('compile', str(EXAMPLES / 'embedding_minilm_lora.toml'), '--out', str(tmp_path / 'build'), '--set', 'fsdp.enabled=false', '--set', 'deepspeed.enabled=true', '--set', 'hardware.platform=cpu')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "LoRA" not in proc.stdout + proc.stderr and (tmp_path / "build" / "deepspeed.json").is_file()


def test_tiny_tokenizer_knows_its_characters():
    """Regression: transformers 5 ignored the vocab file and left 5 special tokens, so every
    character became [UNK]."""
    tok = build_tiny_tokenizer()
    ids = tok("Hello, world 42")["input_ids"]
    assert len(tok) > 60
    assert tok.unk_token_id not in ids
    assert tok.decode(ids, skip_special_tokens=True).replace(" ", "") == "hello,world42"


def test_bad_pair_files_are_family_errors_naming_file_and_line(tmp_path):
    """Regression: a bad line or a missing file gave a traceback instead of a message."""
    from tuner.runtime.families.base import FamilyError

    bad = tmp_path / "pairs.jsonl"
    bad.write_text('{"query": "a", "positive": "b"}\n\n{"query": "c", positive: "d"}\n')
    with pytest.raises(FamilyError, match=r"pairs.jsonl: line 3: not valid JSON"):
        read_pairs(bad)
    bad.write_text('{"query": "a"}\n')
    with pytest.raises(FamilyError, match=r"pairs.jsonl: row 1: an embedding pair needs 'query' \(or 'anchor'\) and 'positive'"):
        read_pairs(bad)
    with pytest.raises(FamilyError, match="data file not found"):
        read_pairs(tmp_path / "missing.jsonl")


def test_one_lora_builder_defaults_overrides_and_refusal():
    """The shared builder: defaults when the settings name no targets, the settings' targets
    otherwise, and (only_present) a clear FamilyError when no default names a layer."""
    from types import SimpleNamespace

    from tuner.runtime.families.base import FamilyError
    from tuner.runtime.families.lora import apply_lora

    def block():
        return torch.nn.ModuleDict({"q_proj": torch.nn.Linear(4, 4), "v_proj": torch.nn.Linear(4, 4),
                                    "up": torch.nn.Linear(4, 4)})

    def settings(targets):
        return SimpleNamespace(lora_rank=2, lora_alpha=4.0, lora_dropout=0.0, lora_target_modules=targets)

    def adapted(model):
        return sorted({n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in model.named_parameters() if "lora_A" in n})

    assert adapted(apply_lora(block(), settings([]), ["q_proj", "k_proj", "v_proj"], only_present=True)) == [
        "q_proj", "v_proj"]
    assert adapted(apply_lora(block(), settings(["up"]), ["q_proj"])) == ["up"]
    model = apply_lora(block(), settings([]), ["q_proj"])
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {
        n for n, _ in model.named_parameters() if "lora_" in n}
    with pytest.raises(FamilyError, match="no LoRA target modules found.*lora_target_modules"):
        apply_lora(block(), settings([]), ["query", "key"], only_present=True)


def test_text_conditioner_tokenize_encode_is_the_sampling_path():
    """Training tokenises in collate and encodes per batch; sampling calls the conditioner:
    both must give the same conditioning (one implementation)."""
    from tuner.runtime.families.diffusion.conditioning import TINY_TEXT_LEN, load_text_conditioner

    cond = load_text_conditioner(None, 32, 16)
    captions = ["a red square", "two blue circles"]
    enc = cond.tokenize(captions)
    assert enc["input_ids"].shape == (2, TINY_TEXT_LEN)
    hidden, pooled = cond.encode(enc["input_ids"], enc["attention_mask"])
    assert hidden.shape == (2, TINY_TEXT_LEN, 32) and pooled.shape == (2, 16)
    hidden2, pooled2 = cond(captions, "cpu")
    torch.testing.assert_close(hidden2, hidden)
    torch.testing.assert_close(pooled2, pooled)
    assert not any(p.requires_grad for p in cond.encoder.parameters())
