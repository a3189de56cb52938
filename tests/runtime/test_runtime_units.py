"""Fast tests of the runtime's pure parts: checkpoint discovery, compatibility, cleanup, LR."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tuner.compiler.plan.strategy import Strategy
from tuner.runtime import checkpoint as ck
from tuner.runtime.artefacts import RunError
from tuner.runtime.maintenance import clear_offload_cache, stale_but_kept


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
    ("zero2", "fsdp2", "sharded", 2, "with DeepSpeed"),
    ("fsdp2", "zero3", "deepspeed", 2, "without DeepSpeed"),
    ("fsdp2", "ddp", "full", 2, "written with fsdp2"),
    ("ddp", "fsdp2", "sharded", 2, "written with ddp"),
    ("fsdp2", "fsdp2", "full", 2, "sharded state dict"),
    ("fsdp2", "fsdp2", "sharded", 4, "written by 2 ranks"),
])
def test_incompatible_resume_is_refused_with_a_way_out(then, now, sdt, world, fragment, tmp_path):
    meta = ck.CheckpointMeta(step=5, strategy=then, state_dict_type="deepspeed" if then.startswith("zero") else
                             ("sharded" if then.startswith("fsdp") else "full"), world_size=2)
    with pytest.raises(RunError) as e:
        ck.check_compatible(meta, Strategy(now), sdt, world, tmp_path)
    assert fragment in e.value.message and "tuner checkpoint export" in e.value.message


def test_compatible_resume_passes(tmp_path):
    meta = ck.CheckpointMeta(step=5, strategy="zero2", state_dict_type="deepspeed", world_size=2)
    ck.check_compatible(meta, Strategy.ZERO2, "deepspeed", 2, tmp_path)


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
    r = subprocess.run([sys.executable, "-m", "tuner", "run", str(tmp_path / "nope")], capture_output=True, text=True)
    assert r.returncode == 2
    assert "build directory not found" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "tuner", "checkpoint", "export", str(tmp_path), "--out",
                        str(tmp_path / "x")], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_polynomial_is_simpletuners_polynomial():
    """Issue 34: SimpleTuner's polynomial (bghira/SimpleTuner@bc8e6ab,
    simpletuner/helpers/training/custom_schedule.py:102-155; power 0.8 and lr_end 4e-7 when unset) and
    tuner's runtime schedule from the imported settings give the same learning rates."""
    import torch
    from tuner.compiler import compile_text
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
