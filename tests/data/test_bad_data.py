"""Data in the wrong shape is refused before any rank starts: the message names the file, the
row and the fix; `tuner run` exits 2 with no traceback (issue 21, issue 27 item 11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.data.data_helpers import family, settings
from tests.tiny_chat_llama import chat_rows, write_jsonl
from tuner.runtime.data_sources.driver import check_data


def _chat_with(bad_row: dict, n: int = 6) -> list[dict]:
    rows = chat_rows(n)
    rows[3] = bad_row
    return rows


CASES = {
    # name: (file name, content (str/bytes/rows), extra data settings, expected fragments)
    "missing column": ("c.jsonl", [{"body": "hello"}] * 3, {},
                       ["c.jsonl", "cannot tell the format from the columns ('body')", "text_column"]),
    "stated format, missing column": ("c.jsonl", [{"text": "hello"}] * 3, {"format": "chat"},
                                      ["c.jsonl", "needs column(s) 'messages'", "messages_column"]),
    "non-string content": ("c.jsonl", _chat_with({"messages": [{"role": "user", "content": "hi"},
                                                              {"role": "assistant", "content": 42}]}), {},
                           ["c.jsonl: row 4", "messages[1].content is int, not a string", "as a string"]),
    "role the template refuses": ("c.jsonl", _chat_with({"messages": [{"role": "narrator", "content": "Once."},
                                                                     {"role": "assistant", "content": "Yes."}]}), {},
                                  ["c.jsonl: row 4", "the chat template refuses this conversation", "narrator",
                                   "data.chat_template"]),
    "no assistant turn": ("c.jsonl", _chat_with({"messages": [{"role": "user", "content": "Hello?"}]}), {},
                          ["c.jsonl: row 4", "no assistant message", "completion_only_loss = false"]),
    "empty file": ("c.jsonl", "", {}, ["c.jsonl", "the file is empty"]),
    "latin-1 bytes": ("c.jsonl", '{"text": "caf\u00e9 cr\u00e8me"}\n'.encode("latin-1"), {},
                      ["c.jsonl: line 1", "not UTF-8", "iconv -f latin1 -t utf-8"]),
    "one-character file": ("c.jsonl", "x", {}, ["c.jsonl: line 1", "not valid JSON", "one JSON object per line"]),
    "100k-deep JSON": ("c.jsonl", "[" * 100_000 + "]" * 100_000 + "\n", {},
                       ["c.jsonl: line 1", "nested 100000 levels deep", "flat JSON object"]),
    "instruction not a string": ("i.jsonl", [{"prompt": "Q?", "completion": "A."}, {"prompt": ["Q"], "completion": "A."}],
                                 {}, ["i.jsonl: row 2", "column 'prompt' is list, not a string"]),
}


def _write(project: Path, name: str, content) -> None:
    p = project / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    elif isinstance(content, str):
        p.write_text(content, encoding="utf-8")
    else:
        write_jsonl(p, content)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_data_is_refused_naming_file_row_and_fix(case, tmp_path, tiny_model):
    from tuner.runtime.data_sources.errors import DataError

    name, content, extra, fragments = CASES[case]
    _write(tmp_path, name, content)
    fam = family(tmp_path, settings(tiny_model, path=name, **extra))
    with pytest.raises(DataError) as err:
        check_data(fam)
    text = str(err.value)
    for frag in fragments:
        assert frag in text, f"{case}: {frag!r} not in {text!r}"
    assert err.value.fix, "the message says what to do"


def test_a_hub_name_is_refused_with_the_command_that_fetches_it(tmp_path, tiny_model):
    from tuner.runtime.data_sources.errors import DataError

    fam = family(tmp_path, settings(tiny_model, path="HuggingFaceH4/ultrachat_200k"))
    with pytest.raises(DataError) as err:
        check_data(fam)
    text = str(err.value)
    assert "tuner downloads nothing" in text
    assert "huggingface-cli download --repo-type dataset HuggingFaceH4/ultrachat_200k" in text
    assert "data.path = 'data/ultrachat_200k'" in text


def test_a_missing_file_and_a_missing_split_name_the_fix(tmp_path, tiny_model):
    from datasets import Dataset, DatasetDict

    from tuner.runtime.data_sources.errors import DataError

    with pytest.raises(DataError, match=r"data file not found: .*nothere.jsonl; fix data.path"):
        check_data(family(tmp_path, settings(tiny_model, path="nothere.jsonl")))
    DatasetDict({"train": Dataset.from_list(chat_rows(4))}).save_to_disk(str(tmp_path / "saved"))
    with pytest.raises(DataError, match=r"no split 'test' \(it has train\); set data.split"):
        check_data(family(tmp_path, settings(tiny_model, path="saved", split="test")))


def test_tuner_run_refuses_bad_data_before_any_rank_starts(tmp_path, tiny_model):
    """Exit 2, one message naming file, row and fix, no traceback, no rank started."""
    from tests.conftest import run_tuner
    from tests.runtime.runtime_helpers import to_toml, tuner_env

    write_jsonl(tmp_path / "c.jsonl", _chat_with({"messages": [{"role": "user", "content": "hi"},
                                                               {"role": "assistant", "content": ["x"]}]}))
    (tmp_path / "settings.toml").write_text(to_toml({
        "model": {"family": "causal_lm", "path": str(tiny_model)},
        "hardware": {"platform": "cpu", "num_processes": 2},
        "data": {"path": "c.jsonl", "seq_len": 64},
        "output": {"dir": "out"}}))
    p = run_tuner("run", str(tmp_path / "settings.toml"), cwd=tmp_path, env=tuner_env(), timeout=300)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert "c.jsonl: row 4: messages[1].content is list, not a string; write the message text as a string" in p.stderr
    assert "rank" not in p.stderr.lower(), "no rank was started"
    assert not (tmp_path / "out" / "metrics.jsonl").exists()
    json.dumps(p.stderr)


def test_tuner_compile_warns_of_a_data_path_missing_here(tmp_path):
    """CI may compile where the data is not: a warning naming the key, exit 0."""
    from tests.conftest import run_tuner

    (tmp_path / "present.jsonl").write_text('{"text": "x"}\n')
    (tmp_path / "s.toml").write_text('[data]\npath = "absent.jsonl"\nvalidation_path = "present.jsonl"\n'
                                     '[hardware]\nplatform = "cpu"\n')
    p = run_tuner("compile", str(tmp_path / "s.toml"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "warning [data.path]: data path 'absent.jsonl' does not exist on this machine" in p.stdout + p.stderr
    assert "present.jsonl" not in p.stdout + p.stderr
