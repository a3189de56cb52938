"""One strategy vocabulary (issue 38): the compiler's `Strategy`; the wizard's coarser choice
(`StrategyChoice`) mapped onto it both ways; the `Plan`'s ``uses_deepspeed`` / ``uses_fsdp``
read from its strategy, still written to the manifest, and a manifest whose entries contradict
its strategy refused before a run."""

from __future__ import annotations

import json
from typing import get_args

import pytest
from tuner.compiler.plan.plan import Plan
from tuner.compiler.plan.strategy import Strategy, StrategyChoice, strategy_choice


def test_the_wizards_choices_map_onto_strategies_and_back():
    for choice in get_args(StrategyChoice):
        assert Strategy.chosen(choice).choice == choice == strategy_choice(choice)
    for s in Strategy:
        back = Strategy.chosen(s.choice, zero_stage=s.zero_stage if s.zero_stage is not None else 2)
        assert back == (Strategy.DDP if s is Strategy.SINGLE else s)
    with pytest.raises(ValueError, match="not a strategy choice"):
        strategy_choice("zero3")


def test_the_wizard_offers_the_vocabulary_and_proposes_in_it():
    from tuner.tui.estimate_view import PROPOSALS
    from tuner.tui.layout import STRATEGIES

    assert tuple(STRATEGIES) == get_args(StrategyChoice)
    for name, edits in PROPOSALS.items():
        stage = edits.get("deepspeed.zero_stage", 2)
        assert Strategy.chosen(edits["strategy"], stage) == Strategy(name.split("+")[0]), name


def _plan(strategy: Strategy) -> Plan:
    return Plan(strategy=strategy, distributed_type="X", platform="cpu", world_size=2, processes_per_machine=2,
                data_parallel_size=2, global_batch_size=4)


@pytest.mark.parametrize("strategy", list(Strategy))
def test_the_plans_uses_are_read_from_its_strategy(strategy):
    plan = _plan(strategy)
    assert (plan.uses_deepspeed, plan.uses_fsdp) == (strategy.is_deepspeed, strategy.is_fsdp)
    written = json.loads(json.dumps(plan.to_dict()))
    assert list(written)[-2:] == ["uses_deepspeed", "uses_fsdp"]
    assert Plan.from_dict(written) == plan


def test_a_manifest_whose_uses_contradict_its_strategy_is_refused(tmp_path):
    from tuner.compiler.compile import compile_text
    from tuner.compiler.artefacts import emit
    from tuner.runtime.artefacts import manifest_problem

    r = compile_text('[hardware]\nplatform = "cpu"\nnum_processes = 2\n[fsdp]\nenabled = true\n',
                     out_dir=tmp_path / "build")
    manifest = json.loads((r.write() / emit.MANIFEST_JSON).read_text())
    assert manifest["plan"]["strategy"] == "fsdp2" and manifest["plan"]["uses_fsdp"] is True
    assert manifest_problem(manifest) is None
    edited = {**manifest, "plan": {**manifest["plan"], "uses_deepspeed": True}}
    assert manifest_problem(edited) == "plan.uses_deepspeed is True but plan.strategy is fsdp2"
