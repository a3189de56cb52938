"""axolotl and LLaMA-Factory data keys -> tuner's [data] keys (compiler/formats/trainer_data.py),
on the public files under tests/compiler/data/peer2: what has an equivalent is imported, the
rest is listed with its reason. In-process import, and `tuner import` itself for the one
local-file config (the peer2 round trips compile them all).

No public config file with axolotl's ``chat_template: jinja`` / ``chat_template_jinja`` was
found (docs/interop.md names the searches): that mapping is checked on a corpus file with its
chat_template keys swapped for the form axolotl's docs give."""

from __future__ import annotations

from pathlib import Path

import yaml
from tuner.compiler.formats.importer import import_files

from tests.conftest import REPO, run_tuner

PEER2 = REPO / "tests" / "compiler" / "data" / "peer2"
AXOLOTL = PEER2 / "axolotl-ai-cloud__axolotl" / "examples"
LLAMAFACTORY = PEER2 / "hiyouga__LLaMA-Factory" / "examples"
MODAL = PEER2 / "modal-labs__llm-finetuning" / "config"


def _data(path: Path) -> tuple[dict, str, dict]:
    imported = import_files([path])
    values = {k: v for k, v in imported.values.items() if k.startswith("data.")}
    return values, "\n".join(imported.remarks), imported.not_distributed.get(path.name, {})


def test_axolotl_chat_dataset_packing_and_held_out_fraction():
    values, remarks, listed = _data(AXOLOTL / "llama-4" / "scout-qlora-flexattn-fsdp2.yaml")
    assert values["data.format"] == "chat"
    assert values["data.messages_column"] == "conversations"  # field_messages
    assert values["data.validation_split"] == 0.0  # val_set_size
    assert values["data.seq_len"] == 4096 and values["data.packing"] is True
    # the hub path, the split slice, the role/content mapping and the named template: listed, with reasons
    assert "'mlabonne/FineTome-100k' is a Hugging Face Hub data set; tuner reads local data only" in remarks
    assert "split 'train[:20%]' is a slice" in remarks
    assert "message_property_mappings have no [data] equivalent" in remarks
    assert "chat_template 'llama4' is one of axolotl's named templates" in remarks
    entry = listed["datasets"][0]
    assert entry["path"] == "mlabonne/FineTome-100k" and entry["split"] == "train[:20%]"
    assert "type" not in entry and "field_messages" not in entry
    assert "val_set_size" not in listed


def test_axolotl_two_datasets_are_listed_and_a_completion_entry_is_text_with_its_field(tmp_path):
    path = AXOLOTL / "alst" / "llama3-8b-fsdp2-alst.yaml"
    values, remarks, listed = _data(path)
    assert values["data.packing"] is True and "sample_packing" not in listed
    assert "datasets lists 2 entries; tuner trains on one data source" in remarks
    assert len(listed["datasets"]) == 2 and "data.format" not in values
    # the file's first entry alone (type: completion, field: text, data_files): text rows from that field
    data = yaml.safe_load(path.read_text())
    data["datasets"] = data["datasets"][:1]
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump(data))
    values, remarks, listed = _data(one)
    assert values["data.format"] == "text" and values["data.text_column"] == "text"
    assert "datasets entry key(s) data_files have no [data] equivalent" in remarks
    assert listed["datasets"] == [{"data_files": ["pretrain/rp_sub.jsonl.zst"],
                                   "path": "togethercomputer/Long-Data-Collections"}]


def test_axolotl_alpaca_type_is_listed_with_its_reason():
    values, remarks, listed = _data(AXOLOTL / "qwen2" / "qlora-fsdp.yaml")
    assert "data.format" not in values
    assert values["data.packing"] is True and values["data.validation_split"] == 0.05
    assert "datasets type 'alpaca' is axolotl's own prompt format" in remarks
    assert listed["datasets"] == [{"path": "tatsu-lab/alpaca", "type": "alpaca"}]


def test_llamafactory_cutoff_len_imported_dataset_names_and_template_listed_with_reasons():
    values, remarks, listed = _data(LLAMAFACTORY / "extras" / "fsdp_qlora" / "llama3_lora_sft.yaml")
    assert values["data.seq_len"] == 2048  # cutoff_len
    assert "dataset 'identity,alpaca_en_demo' names entries of LLaMA-Factory's dataset_info.json" in remarks
    assert "template 'llama3' is one of LLaMA-Factory's named prompt templates" in remarks
    assert listed["dataset"] == "identity,alpaca_en_demo" and listed["template"] == "llama3"


def test_axolotl_one_local_file_through_tuner_import(tmp_path):
    """modal-labs/llm-finetuning's pythia.yml: one local JSONL (ds_type json) in axolotl's
    user-defined prompt format (a `type:` mapping, which the importer used to fail on as
    'cannot be written as TOML')."""
    src = MODAL / "pythia.yml"
    out = tmp_path / "settings.toml"
    proc = run_tuner("import", str(src), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert '[data]\npath = "data.jsonl"\nvalidation_split = 0.05\nseq_len = 4096\npacking = false\n' in text
    assert "format = " not in text  # the user-defined format has no tuner equivalent
    assert "datasets path 'data.jsonl' is relative: axolotl reads it from the directory it is started in" in proc.stdout
    assert ("datasets type is a user-defined prompt format (field_input, field_instruction, field_output put "
            "together by its format string)") in proc.stdout
    assert "warning [data.path]: data path 'data.jsonl' does not exist" in proc.stdout  # theirs: a warning only
    values, remarks, listed = _data(src)
    entry = listed["datasets"][0]
    assert set(entry) == {"type"} and entry["type"]["field_output"] == "answer"  # ds_type json: the .jsonl loader
    assert "ds_type" not in remarks and "sample_packing" not in listed and "val_set_size" not in listed


def test_llamafactory_packing_false_and_no_val_size_mean_what_llamafactory_does():
    values, remarks, listed = _data(LLAMAFACTORY / "ascend" / "qwen3_5moe_lora_sft_fsdp2.yaml")
    assert values["data.packing"] is False and "packing" not in listed
    # val_size unset: LLaMA-Factory trains on every row (tuner's own default would hold out 0.1)
    assert values["data.validation_split"] == 0.0
    assert "no val_size: LLaMA-Factory holds no rows out, imported as data.validation_split = 0" in remarks
    assert "no packing" not in remarks


def test_llamafactory_val_size_is_the_held_out_fraction_and_no_packing_means_none():
    # LLaMA-Factory's examples held out val_size: 0.1 until #6690 (this file is from before it)
    values, remarks, listed = _data(LLAMAFACTORY / "train_lora" / "llama3_lora_sft.yaml")
    assert values["data.validation_split"] == 0.1 and "val_size" not in listed
    assert values["data.packing"] is False  # stage sft, packing unset: LLaMA-Factory does not pack
    assert "no packing: LLaMA-Factory does not pack without it, imported as data.packing = false" in remarks
    assert listed["per_device_eval_batch_size"] == 1  # the evaluation keys stay listed


def test_llamafactory_pretraining_and_neat_packing_pack(tmp_path):
    data = yaml.safe_load((LLAMAFACTORY / "extras" / "fsdp_qlora" / "llama3_lora_sft.yaml").read_text())
    for changes, packing, remark in (({"stage": "pt"}, True, "lets attention cross the documents"),
                                     ({"neat_packing": True}, True, None),
                                     ({"packing": True}, True, "lets attention cross the documents")):
        one = tmp_path / "lf.yaml"
        one.write_text(yaml.safe_dump({**data, **changes}))
        values, remarks, listed = _data(one)
        assert values["data.packing"] is packing and "neat_packing" not in listed, changes
        assert (remark in remarks) if remark else "lets attention cross" not in remarks, changes


def test_axolotl_jinja_template_inline_or_implied(tmp_path):
    data = yaml.safe_load((AXOLOTL / "llama-4" / "scout-qlora-flexattn-fsdp2.yaml").read_text())
    jinja = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
    for template in ({"chat_template": "jinja"}, {}):  # unset: axolotl reads chat_template_jinja as jinja
        cfg = {k: v for k, v in data.items() if k != "chat_template"} | template | {"chat_template_jinja": jinja}
        one = tmp_path / "jinja.yaml"
        one.write_text(yaml.safe_dump(cfg))
        values, remarks, listed = _data(one)
        assert values["data.chat_template"] == jinja, template
        assert "chat_template" not in listed and "chat_template_jinja" not in listed
        assert "named templates" not in remarks
