"""The checkpoint record's ``state_dict_type`` (issue 38): a named vocabulary of its own,
`HeldState` (runtime/checkpoint.py), that spells FSDP's two kinds as the setting of that name
does (`StateDictType`) and adds ``deepspeed`` and ``universal``. Records written by earlier
versions (the first record format, without micro_batch_size / gradient_accumulation_steps /
files) are still read; a record with a word outside the vocabulary is named as damaged. No
ranks: records and state files are written by hand."""

from __future__ import annotations

import json
from typing import get_args

import pytest
from tuner.compiler.keys.choices import StateDictType
from tuner.compiler.plan.strategy import Strategy
from tuner.runtime import checkpoint as ckpt
from tuner.runtime.artefacts import RunError
from tuner.runtime.checkpoint import HeldState

#: The state files each kind of checkpoint holds (what `meta_problem` looks for).
_STATE_FILES = {"deepspeed": "pytorch_model/mp_rank_00_model_states.pt",
                "universal": "pytorch_model/mp_rank_00_model_states.pt",
                "sharded": "pytorch_model_fsdp_0/.metadata", "full": "model.safetensors"}


def _old_record(folder, strategy: str, state: str, step: int = 10) -> None:
    """A checkpoint as the first record format wrote it (runtime/checkpoint.py at da135f9)."""
    folder.mkdir(parents=True)
    for rel in {_STATE_FILES[state], *(["pytorch_model_fsdp_0/__0_0.distcp"] if state == "sharded" else [])}:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(b"x")
    record = {"step": step, "strategy": strategy, "state_dict_type": state, "world_size": 2, "epoch": 0,
              "batches_in_epoch": 20, "tokens_seen": 640, "family": "causal_lm", "manifest": {}}
    (folder / ckpt.META).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def test_the_records_vocabulary_spells_the_settings_words_the_same():
    assert set(get_args(StateDictType)) < set(get_args(HeldState))
    assert set(get_args(HeldState)) - set(get_args(StateDictType)) == {"deepspeed", "universal"}
    # every word the trainer writes (state_dict_kind over every strategy and setting) is in it
    written = {ckpt.state_dict_kind(s, kind) for s in Strategy for kind in get_args(StateDictType)}
    assert written == {"sharded", "full", "deepspeed"}


@pytest.mark.parametrize("strategy,state", [("fsdp2", "sharded"), ("fsdp2", "full"), ("fsdp1", "full"),
                                            ("ddp", "full"), ("single", "full"), ("zero2", "deepspeed"),
                                            ("zero3", "universal")])
def test_records_of_earlier_versions_are_read(tmp_path, strategy, state):
    folder = tmp_path / "checkpoints" / "step-10"
    _old_record(folder, strategy, state)
    assert ckpt.meta_problem(folder) is None
    meta = ckpt.read_meta(folder)
    assert (meta.strategy, meta.state_dict_type, meta.micro_batch_size, meta.files) == (Strategy(strategy), state, 0, {})
    assert ckpt.CheckpointMeta(**json.loads(meta.to_json())) == meta  # and written back the same way


@pytest.mark.parametrize("word", ["SHARDED_STATE_DICT", "fulll", ""])
def test_a_record_with_another_word_is_damaged_and_named(tmp_path, word):
    folder = tmp_path / "checkpoints" / "step-10"
    _old_record(folder, "fsdp2", "sharded")
    record = json.loads((folder / ckpt.META).read_text())
    (folder / ckpt.META).write_text(json.dumps({**record, "state_dict_type": word}))
    assert ckpt.meta_problem(folder) == (f"{ckpt.META}: state_dict_type is {word!r}, not one of "
                                         "sharded, full, deepspeed, universal")
    with pytest.raises(RunError, match="state_dict_type"):
        ckpt.read_meta(folder)
