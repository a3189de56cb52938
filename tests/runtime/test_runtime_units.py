"""Fast tests of the runtime's pure parts: checkpoint discovery, compatibility, cleanup, LR."""

from __future__ import annotations

from pathlib import Path

import pytest
from tuner.compiler.plan.strategy import Strategy
from tuner.runtime import checkpoint as ck
from tuner.runtime.artefacts import RunError
from tuner.runtime.maintenance import clear_offload_cache, stale_but_kept
from tuner.runtime.resume_rules import Layout, check_compatible

from tests import harness


def _complete(d, step):
    p = d / f"step-{step}"
    p.mkdir(parents=True)
    (p / ck.META).write_text(ck.CheckpointMeta(step=step, strategy="fsdp2", state_dict_type="sharded",
                                               world_size=2).to_json())
    return p


def test_latest_ignores_partial_and_follows_pointer(tmp_path):
    _complete(tmp_path, 3)
    _complete(tmp_path, 6)
    (tmp_path / ".tmp-step-9").mkdir()
    (tmp_path / "step-12").mkdir()  # no meta: incomplete
    assert ck.latest_checkpoint(tmp_path).name == "step-6"
    ck.write_latest(tmp_path, "step-3")
    assert ck.latest_checkpoint(tmp_path).name == "step-3"
    ck.write_latest(tmp_path, "step-12")  # pointer to an incomplete one is not trusted
    assert ck.latest_checkpoint(tmp_path).name == "step-6"
    assert [p.name for p in ck.remove_partial(tmp_path)] == [".tmp-step-9"]


def test_publish_and_prune(tmp_path):
    for s in (1, 2, 3):
        tmp = ck.tmp_dir_for(tmp_path, s)
        tmp.mkdir()
        ck.publish(tmp_path, tmp, ck.CheckpointMeta(step=s, strategy="ddp", state_dict_type="full", world_size=2))
    assert (tmp_path / "latest").read_text().strip() == "step-3"
    ck.prune(tmp_path, 2)
    assert [p.name for _, p in ck.complete_checkpoints(tmp_path)] == ["step-2", "step-3"]


def test_resolve_resume(tmp_path):
    out = tmp_path / "out"
    assert ck.resolve_resume("", out) is None
    assert ck.resolve_resume("latest", out) is None
    with pytest.raises(RunError, match="not found"):
        ck.resolve_resume(str(tmp_path / "nope"), out)
    bad = tmp_path / "bad"
    bad.mkdir()
    with pytest.raises(RunError, match="not a complete tuner checkpoint"):
        ck.resolve_resume(str(bad), out)


@pytest.mark.parametrize("then,now,sdt,world,fragment", [
    ("zero2", "fsdp1", "sharded", 2, "with DeepSpeed"),
    ("fsdp1", "fsdp2", "sharded", 2, "written with fsdp1"),
    ("fsdp1", "fsdp1", "sharded", 4, "fsdp1 resumes only at the same world size"),
])
def test_incompatible_resume_is_refused_with_a_way_out(then, now, sdt, world, fragment, tmp_path):
    meta = ck.CheckpointMeta(step=5, strategy=then, state_dict_type="deepspeed" if then.startswith("zero") else
                             ("sharded" if then.startswith("fsdp") else "full"), world_size=2,
                             micro_batch_size=4, gradient_accumulation_steps=1)
    with pytest.raises(RunError) as e:
        check_compatible(meta, Strategy(now), sdt, Layout(4 * 2 // world, 1, world), tmp_path)
    assert fragment in e.value.message and "tuner checkpoint export" in e.value.message


@pytest.mark.parametrize("then,now,sdt", [("zero2", "fsdp2", "sharded"), ("zero3", "ddp", "full"),
                                          ("fsdp2", "ddp", "full"), ("ddp", "fsdp2", "sharded"),
                                          ("fsdp2", "fsdp2", "full"), ("fsdp2", "zero3", "deepspeed"),
                                          ("fsdp2", "zero2", "deepspeed"), ("ddp", "zero1", "deepspeed"),
                                          ("zero3", "zero2", "deepspeed")])
def test_another_backend_is_carried_through_the_portable_form(then, now, sdt, tmp_path):
    from tuner.runtime.resume_rules import carried_across

    kind = "deepspeed" if then.startswith("zero") else ("sharded" if then.startswith("fsdp") else "full")
    meta = ck.CheckpointMeta(step=5, strategy=then, state_dict_type=kind, world_size=2,
                             micro_batch_size=4, gradient_accumulation_steps=1)
    assert check_compatible(meta, Strategy(now), sdt, Layout(4, 1, 2), tmp_path) == ""
    assert carried_across(meta, Strategy(now), sdt)
    assert not carried_across(meta, Strategy(then), kind)


def test_compatible_resume_passes(tmp_path):
    meta = ck.CheckpointMeta(step=5, strategy="zero2", state_dict_type="deepspeed", world_size=2)
    assert check_compatible(meta, Strategy.ZERO2, "deepspeed", Layout(4, 1, 2), tmp_path) == ""


def test_world_size_change_keeps_the_global_batch(tmp_path):
    """FSDP2 4 -> 2 ranks: allowed when micro x accumulation x ranks stays 8, and the data
    position (micro-batches per rank) is carried into the new layout: 3 batches of 2 on 4
    ranks = 24 samples = 6 batches of 2 on 2 ranks."""
    from tuner.runtime.resume_rules import batches_to_skip

    meta = ck.CheckpointMeta(step=3, strategy="fsdp2", state_dict_type="sharded", world_size=4,
                             batches_in_epoch=3, micro_batch_size=2, gradient_accumulation_steps=1)
    kept = check_compatible(meta, Strategy.FSDP2, "sharded", Layout(2, 2, 2), tmp_path)
    assert "global batch kept" in kept
    assert batches_to_skip(meta, Layout(2, 2, 2)) == (6, 0)
    assert batches_to_skip(meta, Layout(4, 1, 2)) == (3, 0)
    assert batches_to_skip(meta, Layout(1, 1, 8)) == (3, 0)


@pytest.mark.parametrize("world,micro,accum,fix", [
    (2, 2, 1, "training.micro_batch_size = 4, or training.gradient_accumulation_steps = 2"),
    (3, 2, 1, "no micro batch and accumulation on 3 ranks make 8: run on a world size that divides it (1, 2, 4, 8)"),
    (8, 2, 2, "training.micro_batch_size = 1 with training.gradient_accumulation_steps = 1"),
])
def test_world_size_that_cannot_keep_the_global_batch_is_refused_naming_the_fix(world, micro, accum, fix, tmp_path):
    meta = ck.CheckpointMeta(step=3, strategy="fsdp2", state_dict_type="sharded", world_size=4,
                             batches_in_epoch=3, micro_batch_size=2, gradient_accumulation_steps=1)
    with pytest.raises(RunError) as e:
        check_compatible(meta, Strategy.FSDP2, "sharded", Layout(micro, accum, world), tmp_path)
    assert "global batch 8" in e.value.message and fix in e.value.message, e.value.message
    assert "--new-global-batch" in e.value.message
    # the explicit opt-in continues, saying how the schedule and the data position were carried
    note = check_compatible(meta, Strategy.FSDP2, "sharded", Layout(micro, accum, world), tmp_path,
                            new_global_batch=True)
    assert "LR schedule continue from step 3" in note and "24 already trained" in note


def test_clear_offload_cache_removes_only_deepspeed_swap_dirs(tmp_path):
    (tmp_path / "zero_stage_3" / "optimizer" / "rank0").mkdir(parents=True)
    (tmp_path / "zero_stage_3" / "optimizer" / "rank0" / "x.tensor.swp").write_bytes(b"0")
    (tmp_path / "zero_stage_3" / "float32params" / "rank1").mkdir(parents=True)
    (tmp_path / "my_data.bin").write_bytes(b"keep")
    (tmp_path / "zero_stage_2" / "notes").mkdir(parents=True)  # not DeepSpeed's layout: kept
    removed = clear_offload_cache(tmp_path)
    assert removed == [tmp_path / "zero_stage_3"]
    assert (tmp_path / "my_data.bin").read_bytes() == b"keep"
    assert stale_but_kept(tmp_path) == [tmp_path / "zero_stage_2"]
    assert clear_offload_cache(tmp_path / "missing") == []


def test_lr_schedule_is_transformers_get_scheduler():
    import torch
    from tuner.runtime.optim import lr_schedule

    def lrs(kind, warmup, total, steps):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        sched, out = lr_schedule(kind, opt, warmup, total), []
        for _ in range(steps):
            out.append(round(sched.get_last_lr()[0], 3))
            opt.step()
            sched.step()
        return out

    assert lrs("linear", 2, 10, 11) == [0.0, 0.5, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0.0]
    cos = lrs("cosine", 0, 10, 11)
    assert cos[0] == 1.0 and cos[5] == 0.5 and cos[10] == 0.0
    assert lrs("constant", 3, 10, 10) == [0.0, 0.333, 0.667] + [1.0] * 7  # constant after warmup
    assert lrs("constant", 0, 10, 3) == [1.0] * 3
    assert lrs("polynomial", 0, 4, 5) == [1.0, 0.75, 0.5, 0.25, 0.0]  # SimpleTuner's name works too


def test_missing_build_dir_is_a_clear_error(tmp_path):
    r = harness.tuner('run', str(tmp_path / 'nope'))
    assert r.returncode == 2
    assert "build directory not found" in r.stderr and "Traceback" not in r.stderr
    r = harness.tuner('checkpoint', 'export', str(tmp_path), '--out', str(tmp_path / 'x'))
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_polynomial_is_simpletuners_polynomial():
    """Issue 34: SimpleTuner's polynomial (bghira/SimpleTuner@bc8e6ab,
    simpletuner/helpers/training/custom_schedule.py:102-155; power 0.8 and lr_end 4e-7 when unset) and
    tuner's runtime schedule from the imported settings give the same learning rates."""
    import torch
    from tuner.compiler.compile import compile_text
    from tuner.compiler.formats.importer import import_files, to_toml
    from tuner.runtime.optim import lr_schedule

    data = Path(__file__).parents[1] / "compiler" / "data" / "simpletuner"
    imp = import_files([data / "fsdp2-full.toml"])  # polynomial, lr_end and lr_power unset
    t = compile_text(to_toml(imp), path=data / "settings.toml").settings.training
    assert (t.lr_scheduler, t.lr_power, t.lr_end) == ("polynomial", 0.8, 4e-7)
    lr, warmup, total = 1e-4, 3, 20  # the lr schedule's shape, not the file's learning rate

    def simpletuner(step: int) -> float:  # custom_schedule.py:141-152, transcribed
        if step < warmup:
            return lr * step / max(1, warmup)
        if step > total:
            return t.lr_end
        return (lr - t.lr_end) * (1 - (step - warmup) / (total - warmup)) ** t.lr_power + t.lr_end

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched = lr_schedule(t.lr_scheduler, opt, warmup, total, t)
    ours = []
    for _ in range(total + 2):
        ours.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert ours == pytest.approx([simpletuner(s) for s in range(total + 2)], rel=1e-9, abs=1e-12)


def test_cli_refuses_a_world_that_cannot_keep_the_global_batch_before_any_rank(tmp_path, capsys):
    """`tuner run settings.toml --resume CKPT` on 3 ranks, for a checkpoint written by 4 ranks at
    global batch 8: refused by the launcher (in this process, no rank started, nothing written
    to the output directory), naming the settings that keep the batch; exit 2, no traceback."""
    import json

    from tuner.commands.cli import main

    from tests.runtime.runtime_helpers import merged, to_toml, write_data

    step = tmp_path / "old" / "checkpoints" / "step-4"
    (step / "pytorch_model_fsdp_0").mkdir(parents=True)
    (step / "pytorch_model_fsdp_0" / ".metadata").write_bytes(b"x")
    (step / "pytorch_model_fsdp_0" / "__0_0.distcp").write_bytes(b"x")
    (step / ck.META).write_text(ck.CheckpointMeta(step=4, strategy="fsdp2", state_dict_type="sharded", world_size=4,
                                                  batches_in_epoch=4, micro_batch_size=2,
                                                  gradient_accumulation_steps=1).to_json())
    write_data(tmp_path)
    fsdp = {"enabled": True, "version": 2, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}
    settings = merged(fsdp=fsdp, hardware={"platform": "cpu", "num_processes": 3},
                      training={"micro_batch_size": 2, "max_steps": 8})
    (tmp_path / "settings.toml").write_text(to_toml(settings))
    code = main(["run", str(tmp_path / "settings.toml"), "--resume", str(step)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "global batch 8 (micro_batch_size 2 x gradient_accumulation_steps 1 x 4 ranks)" in err
    assert "run on a world size that divides it (1, 2, 4, 8)" in err and "--new-global-batch" in err
    left = [p.name for p in (tmp_path / "out").iterdir()]
    assert left == [".tuner-run.lock"], f"no rank started: only the launcher's lock in the output directory: {left}"
    # 2 ranks at micro 2: the refusal names the accumulation (or micro batch) that keeps it
    settings["hardware"]["num_processes"] = 2
    (tmp_path / "settings.toml").write_text(to_toml(settings))
    assert main(["run", str(tmp_path / "settings.toml"), "--resume", str(step)]) == 2
    err = capsys.readouterr().err
    assert "set training.micro_batch_size = 4, or training.gradient_accumulation_steps = 2" in err, err
    assert json.loads((step / ck.META).read_text())["world_size"] == 4
