"""runtime/data_sources/ owns the data path, file -> batch, for every family (issue 38, item 3).

* One chat row, from its JSONL file to a training batch on a rank, crosses between
  runtime/data_sources/ and runtime/families/ at most twice (the family's one hook and back);
  before the driver it crossed 20 times (`tests/data/data_path_trace.py` counts it).
* The check before any rank starts and the ranks run one driver: the check tokenises into the
  cache and a rank then encodes nothing.
* No module under runtime/families/ reads data (datasets, image folders, JSONL, CSV): the
  readers are data_sources'.
* No optional family method is looked up by name (`getattr`/`hasattr` with a `Family` method's
  name): every one is declared on `Family`, so mypy checks each call.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.data.data_helpers import family, settings
from tests.tiny_chat_llama import chat_rows, write_jsonl

REPO = Path(__file__).resolve().parents[2]
#: What reading data looks like in code: `datasets`' loaders, data_sources' own opener, walking
#: an image folder, JSONL and CSV readers, opening an image. (A family may call data_sources'
#: functions: its cache encodes `image_sets.load_image`'s pixels with its VAE.)
READERS = ("load_dataset", "load_from_disk", "open_dataset", "read_jsonl", "DictReader", "rglob", "glob",
           "Image.open", "open_image")


def test_one_chat_row_crosses_between_data_sources_and_families_at_most_twice(tmp_path, tiny_model):
    from tests.data.data_path_trace import trace_row_to_batch

    counter = trace_row_to_batch(tiny_model, tmp_path)
    assert counter.count <= 2, "\n".join(counter.trail)


def test_the_check_before_the_ranks_fills_the_cache_the_ranks_read(tmp_path, tiny_model):
    from tuner.runtime.data_sources.driver import check_data, rank_data
    from tuner.runtime.data_sources.encode import Encoder

    write_jsonl(tmp_path / "c.jsonl", chat_rows(16))
    s = settings(tiny_model, path="c.jsonl", validation_split=0.25)
    line = check_data(family(tmp_path, s))
    assert line is not None and line.startswith("data: c.jsonl (chat): 16 documents")
    encoded = []
    code = Encoder.__call__.__code__

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            encoded.append(1)

    sys.setprofile(profile)
    try:
        data = rank_data(family(tmp_path, s, rank=1, world=2))
    finally:
        sys.setprofile(None)
    assert not encoded, "a rank encoded rows the launcher's check had already encoded: two pipelines"
    assert data.val is not None and len(data.train) > 0 and data.stats["format"] == "chat"


def _calls(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            out.append(ast.unparse(node.func))
    return out


def test_no_family_module_reads_data():
    found = []
    for path in sorted((REPO / "runtime" / "families").rglob("*.py")):
        for call in _calls(ast.parse(path.read_text(encoding="utf-8"))):
            if any(call == r or call.endswith("." + r) for r in READERS):
                found.append(f"{path.relative_to(REPO)}: {call}(...)")
    assert not found, "data is read in runtime/data_sources/, not in a family:\n" + "\n".join(found)


def test_no_family_method_is_looked_up_by_name():
    from tuner.runtime.families.base import Family

    methods = {name for name in dir(Family) if callable(getattr(Family, name)) and not name.startswith("__")}
    methods |= {"streams_export", "stream"}
    found = []
    for folder in ("runtime", "commands", "tui"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                        and "fam" in ast.unparse(node.args[0])
                        and isinstance(node.args[1], ast.Constant) and node.args[1].value in methods):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "declare the method on Family (runtime/families/base.py) and call it:\n" + "\n".join(found)
