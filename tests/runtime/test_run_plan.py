"""The run plan (runtime/run_plan.py): what `tuner run`, `tuner launch` and `tuner check` decide
before any rank starts is decided once, by one function, and refused there. In-process: no
rank starts here (tests/tiers.py's counter shows it); tests/reliability/test_run_plan_ranks.py
shows the ranks reading the plan and deciding none of it again."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tuner.compiler.compile import compile_text
from tuner.compiler.diagnostics import EXIT_INVALID, EXIT_USAGE
from tuner.compiler.plan.strategy import Strategy
from tuner.runtime import run_plan
from tuner.runtime.artefacts import load
from tuner.runtime.checkpoint import META, CheckpointMeta

from tests.reliability.rel_helpers import refused_before_launch, tuner

REPO = Path(__file__).resolve().parents[2]
TINY = """\
[model]
family = "causal_lm"
path = "builtin:micro-llama"
[hardware]
platform = "cpu"
num_processes = {ranks}
[data]
seq_len = 32
[training]
micro_batch_size = {micro}
max_steps = 8
[checkpoint]
every_steps = 2
[output]
dir = "out"
{more}"""


def _build(d: Path, ranks: int = 1, micro: int = 2, more: str = "", training: str = "", checkpoint: str = "") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    text = TINY.format(ranks=ranks, micro=micro, more=more)
    text = text.replace("max_steps = 8\n", f"max_steps = 8\n{training}").replace("[checkpoint]\n", f"[checkpoint]\n{checkpoint}")
    return compile_text(text, out_dir=d / "build").write()


def _checkpoint(d: Path, strategy: str, world: int, micro: int, step: int = 2, batches: int = 6) -> Path:
    """A checkpoint's folder as a run leaves it, as far as the plan reads one: its record and
    non-empty state files (the plan refuses or decides before any tensor is loaded)."""
    ck = d / "checkpoints" / f"step-{step}"
    deepspeed = Strategy(strategy).is_deepspeed
    state = ck / ("pytorch_model/mp_rank_00_model_states.pt" if deepspeed else "model.safetensors")
    state.parent.mkdir(parents=True)
    state.write_bytes(b"state")
    meta = CheckpointMeta(step=step, strategy=Strategy(strategy), state_dict_type="deepspeed" if deepspeed else "full",
                          world_size=world, batches_in_epoch=batches, micro_batch_size=micro,
                          gradient_accumulation_steps=1)
    (ck / META).write_text(meta.to_json(), encoding="utf-8")
    return ck


def _plan(build: Path, **options) -> run_plan.RunPlan:
    with run_plan.make_plan(load(build), run_plan.Options(**options)) as plan:
        return plan


def test_a_trainer_the_runtime_lacks_is_refused_by_the_plan_before_any_rank_starts(tmp_path):
    """Optimizer steps in gradient hooks (training.optimizer_in_backward), which tuner's trainer
    does not implement: refused by the plan, nothing after it decided, no rank, nothing written."""
    refused = _build(tmp_path, training="optimizer_in_backward = true\n")
    plan = _plan(refused)
    assert plan.refusal is not None and plan.refusal.exit_code == EXIT_INVALID
    assert plan.launcher is None and plan.topology is None  # nothing after the refusal is decided
    p = refused_before_launch("run", refused, cwd=tmp_path)  # asserts no rank started
    assert p.returncode == EXIT_INVALID
    assert p.stderr.strip() == f"tuner run: {plan.refusal.message}"
    assert "training.optimizer_in_backward" in p.stderr
    assert not (tmp_path / "out").exists()  # refused before the output lock: nothing written


def test_an_incompatible_checkpoint_is_refused_by_the_plan_before_any_rank_starts(tmp_path):
    build = _build(tmp_path)
    ck = _checkpoint(tmp_path / "elsewhere", "zero2", world=1, micro=2)
    plan = _plan(build, resume=str(ck))
    assert plan.refusal is not None and plan.refusal.exit_code == EXIT_USAGE
    assert f"checkpoint {ck} was written with DeepSpeed (zero2)" in plan.refusal.message
    p = refused_before_launch("run", build, "--resume", ck, cwd=tmp_path)
    assert p.returncode == EXIT_USAGE and p.stderr.strip() == f"tuner run: {plan.refusal.message}", p.stderr
    assert not (tmp_path / "out" / ".tuner-build").exists()  # the run's copy is written only once it starts


def test_the_plan_decides_the_resume_the_global_batch_and_the_data_position(tmp_path):
    """A DDP checkpoint of 2 ranks x micro 2 (global batch 4), 6 micro-batches into its epoch,
    resumed on 4 ranks x micro 1: the global batch is kept, each rank skips 24 / 4 = 6 batches."""
    build = _build(tmp_path, ranks=4, micro=1)
    ck = _checkpoint(tmp_path / "out", "ddp", world=2, micro=2)
    plan = _plan(build, resume="latest", max_steps=4)
    assert plan.refusal is None, plan.refusal
    r = plan.ranks.resume
    assert (r.asked, r.chosen, r.checkpoint, r.convert) == ("latest", str(ck), str(ck), False)
    assert r.kept.startswith("global batch kept: 4 (micro_batch_size 2") and r.step_checked
    assert (r.skip, r.short, r.position, r.round) == (6, 0, 24, 4)
    assert plan.ranks.max_steps == 4 and plan.data_line and plan.data_line.startswith("data: builtin")
    # what every rank runs: the run's own copy of the build and the plan beside it
    copy = tmp_path / "out" / ".tuner-build"
    assert plan.build_dir == str(copy) and plan.plan_file == str(copy / run_plan.PLAN_FILE)
    assert plan.launcher is not None and plan.launcher.kind == "elastic" and plan.launcher.nproc == 4
    assert plan.launcher.entry.module == run_plan.WORKER
    assert plan.launcher.entry.args == (str(copy.resolve()), "--plan", str(copy / run_plan.PLAN_FILE))
    assert dict(plan.launcher.env)["ACCELERATE_USE_CPU"] == "true"
    # a step past the run's last is refused by the plan, naming it
    past = _plan(build, resume="latest", max_steps=1)
    assert past.refusal is not None and "step" in past.refusal.message and past.launcher is None


def test_a_zero_checkpoint_of_another_world_size_is_converted_first(tmp_path):
    build = _build(tmp_path, ranks=2, more="[deepspeed]\nenabled = true\nzero_stage = 2\n")
    ck = _checkpoint(tmp_path / "out", "zero2", world=1, micro=4)
    plan = _plan(build, resume="latest")
    assert plan.refusal is None, plan.refusal
    r = plan.ranks.resume
    assert r.convert and r.chosen == str(ck) and r.checkpoint == str(tmp_path / "out" / "checkpoints" / "universal-step-2")
    assert dict(plan.launcher.env)["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == str(
        (tmp_path / "out" / ".tuner-build").resolve() / "deepspeed.json")  # the build the ranks read


def test_the_three_commands_share_the_plans_function(tmp_path, monkeypatch):
    """`tuner run`, `tuner launch` and `tuner check` each make their plan with `make_plan`, once,
    and say its refusal (here a bad knob) as their own line and exit code, before any rank."""
    build = _build(tmp_path)
    script = tmp_path / "train.py"
    script.write_text("print('hello')\n")
    made: list[str] = []
    real = run_plan.make_plan

    def counted(arts, opts, *a, **kw):
        made.append(opts.command)
        return real(arts, opts, *a, **kw)

    monkeypatch.setattr(run_plan, "make_plan", counted)
    monkeypatch.setenv("TUNER_HANG_S", "soon")
    said = "$TUNER_HANG_S = 'soon' is not a positive number of seconds"
    for command, argv in (("tuner run", ["run", build]), ("tuner launch", ["launch", build, script]),
                          ("tuner check", ["check", build])):
        p = refused_before_launch(*argv, cwd=tmp_path)
        assert p.returncode == EXIT_USAGE and f"{command}: {said}" in p.stderr, (command, p.stdout, p.stderr)
        assert made[-1] == command
    assert made == ["tuner run", "tuner launch", "tuner check"]


def test_a_launch_plan_runs_the_script_where_the_person_is(tmp_path, monkeypatch):
    build = _build(tmp_path)
    monkeypatch.chdir(tmp_path)
    plan = _plan(build, command=run_plan.LAUNCH, target=("-m", "mymodule", "--x"))
    assert plan.refusal is None and plan.launcher is not None
    assert plan.launcher.entry.module == run_plan.BOOTSTRAP and plan.launcher.entry.args == (str(build), "-m", "mymodule", "--x")
    assert plan.launcher.entry.gpu_argv == ("--module", "mymodule", "--x") and plan.launcher.cwd == str(tmp_path)
    assert not plan.trains and plan.plan_file == "" and plan.ranks == run_plan.RankPlan()


RANK_MODULES = ("runtime/trainer.py", "runtime/worker.py", "runtime/resume_agree.py")
#: The policy the plan applies before any rank starts: never called on a rank.
POLICY = {"check_compatible", "check_global_batch", "check_strategy", "resolve_resume", "check_output_dir",
          "needs_universal", "to_universal", "batches_to_skip", "check_run_data", "clear_offload_cache",
          "check_installed", "refuse_stale", "trainable", "decide_resume", "make_plan"}


@pytest.mark.parametrize("module", RANK_MODULES)
def test_the_ranks_modules_call_none_of_the_plans_policy(module):
    tree = ast.parse((REPO / module).read_text(encoding="utf-8"))
    called = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
              for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert not called & POLICY, f"{module} decides again what the run plan decided: {sorted(called & POLICY)}"


def test_a_trainer_without_a_plan_does_not_decide_a_resume_itself(tmp_path):
    from tuner.runtime.artefacts import RunError
    from tuner.runtime.trainer import Trainer

    arts = load(_build(tmp_path, checkpoint='resume = "auto"\n'))
    assert arts.settings.checkpoint.resume == "auto"
    with pytest.raises(RunError, match="decided before the ranks start"):
        Trainer(arts)
    assert Trainer(arts, plan=run_plan.RankPlan()).plan.resume.asked == ""


def test_the_ranks_plan_reads_back_as_written(tmp_path):
    plan = run_plan.RankPlan(run_plan.Resume(asked="latest", chosen="/o/step-2", checkpoint="/o/step-2", kept="k",
                                             step_checked=True, skip=3, position=12, round=4), 8, ("m:C",))
    (tmp_path / run_plan.PLAN_FILE).write_text(plan.to_json())
    assert run_plan.read_rank_plan(tmp_path / run_plan.PLAN_FILE) == plan
    code, _, err = tuner("run", tmp_path / "nothing-here")
    assert code == EXIT_USAGE and "tuner run: build directory not found" in err
