"""`tuner launch` runs a script built on the HF Trainer (trl's SFTTrainer, tests/launch/hf_sft.py:
a tiny Llama made from a config, the bundled tokenizer, a local dataset; no tuner import) on
2 CPU ranks: one world of 2 that finishes with exit 0, on the FSDP2 and ZeRO-2 + CPU optimizer
offload builds. The HF Trainer reads the accelerate/DeepSpeed environment tuner derived from
the compiled YAML; the CPU shim corrects the `Accelerator` the Trainer builds.

`trainer.save_model()` (issue 23, item 12): under the FSDP2 build, whose state dict is sharded,
the Trainer writes no model, silently; `tuner launch` says so up front with the one-line fix,
and with that line the model is saved and loads. Under ZeRO-2 it saves as it is.

These two launches are also `tuner launch`'s FSDP2 and ZeRO-2 cases: each rank holds its half of
the FSDP2 parameters, or of ZeRO-2's fp32 master weights (test_launch_script.py has DDP and ZeRO-3)."""

from __future__ import annotations

import pytest

from launch_helpers import CPU2, HERE, compile_build, rank_reports, tuner

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the HF-Trainer script needs trl (pip install 'tuner-train[test]')")

HF_BUILDS = {
    "fsdp2": {"fsdp": {"enabled": True, "version": 2}},  # transformer wrap: the model's _no_split_modules
    "zero2_offload": {"deepspeed": {"enabled": True, "zero_stage": 2, "offload_optimizer": "cpu"},
                      "training": {"micro_batch_size": 2}},
}


@pytest.mark.parametrize("strategy", sorted(HF_BUILDS))
def test_hf_trainer_script_on_two_cpu_ranks(tmp_path, strategy):
    from tuner.runtime.families.causal_lm import bundled_dir

    build = compile_build(tmp_path, CPU2, HF_BUILDS[strategy])
    out, saved = tmp_path / "report", tmp_path / "saved"
    p = tuner("launch", str(build), str(HERE / "hf_sft.py"), "--tokenizer", str(bundled_dir() / "tokenizer"),
              "--out", str(out), "--steps", "4", "--batch", "2", "--save", str(saved), cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    assert "Traceback" not in p.stderr
    from tuner.runtime.launch_env import TRAINER_SAVE_FIX

    fsdp = strategy == "fsdp2"
    assert (TRAINER_SAVE_FIX in p.stderr) == fsdp, p.stderr[-3000:]
    assert bool(list((saved / "as-is").glob("*.safetensors"))) != fsdp  # why the note is needed
    _loads_as_trained(saved / "fixed")
    reports = rank_reports(out, 2)
    for r, rep in enumerate(reports):
        assert (rep["process_index"], rep["num_processes"], rep["args_world_size"]) == (r, 2, 2)
        assert rep["global_step"] == 4 and len(rep["losses"]) == 4
    if strategy == "fsdp2":
        assert all(rep["distributed_type"] == "FSDP" and rep["is_fsdp"] and rep["dtensor_params"] > 0
                   for rep in reports), reports
        # parameters sharded as FSDP2 says (test_launch_script's FSDP2 case, folded here): each rank
        # holds about half, and the two halves make the whole model
        assert all(0.4 < rep["local_numel"] / rep["numel"] < 0.6 for rep in reports), reports
        assert reports[0]["local_numel"] + reports[1]["local_numel"] >= reports[0]["numel"], reports
    else:
        assert all(rep["distributed_type"] == "DEEPSPEED" and rep["is_deepspeed"] and rep["zero_cpu_offload"]
                   and rep["ds_optimizer"] == "DeepSpeedCPUAdam" for rep in reports), reports
        # ZeRO-2 partitions the optimizer's fp32 master weights (test_launch_script's ZeRO-2 case,
        # folded here): each rank's partition is about half the model
        assert all(0.4 < rep["zero_partition_numel"] / rep["numel"] < 0.6 for rep in reports), reports


def _loads_as_trained(directory):
    """The saved model is whole: from_pretrained loads every weight of the tiny Llama."""
    from transformers import LlamaForCausalLM

    model, info = LlamaForCausalLM.from_pretrained(directory, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert model.config.hidden_size == 32 and sum(p.numel() for p in model.parameters()) > 0
