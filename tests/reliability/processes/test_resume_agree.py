"""Issue 40, the partial checkpoint seen by rank 0 only: the ranks' views of what to resume,
compared in-process (`runtime/resume_agree.py`'s rule; the launch is test_rank_faults.py's
``partial_checkpoint``)."""

from __future__ import annotations

from tuner.runtime.resume_agree import disagreement


def view(rank, machine, path, complete, error=None):
    return {"rank": rank, "machine": machine, "host": "h", "path": path, "error": error,
            "ckdir": "/o/checkpoints", "complete": complete}


def test_the_same_step_on_every_rank_is_agreed_even_at_other_paths():
    assert disagreement([view(0, 0, "/o/checkpoints/step-4", ["step-2", "step-4"]),
                         view(1, 1, "/mnt/o/checkpoints/step-4", ["step-4"])]) is None
    assert disagreement([view(0, 0, None, []), view(1, 0, None, [])]) is None  # a fresh start everywhere


def test_different_steps_stop_every_rank_naming_each_view_and_the_last_common_checkpoint():
    said = disagreement([view(0, 0, "/o/checkpoints/step-4", ["step-2", "step-4"]),
                         view(1, 1, "/o/checkpoints/step-2", ["step-2"])])
    assert "rank 0 on machine 0 (h) would resume step-4" in said and "rank 1 on machine 1 (h) would resume step-2" in said
    assert "the last complete checkpoint every rank sees is step-2 (/o/checkpoints/step-2)" in said
    assert "--resume /o/checkpoints/step-2" in said
    none = disagreement([view(0, 0, "/o/checkpoints/step-4", ["step-4"]), view(1, 1, None, [])])
    assert "would resume nothing" in none and "no complete checkpoint is seen by every rank" in none


def test_one_rank_that_cannot_resume_stops_them_all_with_its_reason():
    said = disagreement([view(0, 0, None, [], error="the latest checkpoint X is damaged"),
                         view(1, 1, "/o/checkpoints/step-2", ["step-2"])])
    assert said.startswith("rank 0 on machine 0 (h) cannot resume: the latest checkpoint X is damaged")
    assert "rank 1 on machine 1 (h) would resume step-2" in said
    same = disagreement([view(0, 0, None, [], error="damaged"), view(1, 0, None, [], error="damaged")])
    assert same == "damaged"  # every rank's own message, once
