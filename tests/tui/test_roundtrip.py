"""Opening an existing, commented settings file, changing one value and saving changes
exactly one line: comments, key order and untouched keys survive (tomlkit)."""

from __future__ import annotations

import difflib
import shutil

import pytest
from tuner.compiler.compile import compile_file

from .conftest import EXAMPLES, choose, make_app, type_into

pytestmark = pytest.mark.tui

COMMENTED = """\
# Team settings for the 2-GPU box. Keep the comments!
[model]
family = "causal_lm"          # a decoder-only LM
path = "builtin:tiny-llama"

# ---- topology ----
[hardware]
num_processes = 2   # two GPUs

[fsdp]
enabled = true
version = 2
transformer_layer_cls_to_wrap = ["LlamaDecoderLayer"]  # from `tuner blocks`

[training]
micro_batch_size = 4     # per rank
learning_rate = 3e-3
"""


def changed_lines(before: str, after: str) -> list[str]:
    return [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


async def test_one_value_changed_is_a_one_line_diff(tmp_path, _wizard_env):
    path = _wizard_env / "settings.toml"
    app = make_app(path, COMMENTED, tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f5")
        await type_into(pilot, "training.micro_batch_size", "8")
        await pilot.press("ctrl+s")
        await pilot.pause()
    after = path.read_text()
    assert changed_lines(COMMENTED, after) == ["-micro_batch_size = 4     # per rank", "+micro_batch_size = 8     # per rank"]
    assert compile_file(path).settings.training.micro_batch_size == 8


async def test_flat_alias_is_edited_in_place(tmp_path, _wizard_env):
    """The seed-style flat file (`fsdp_version = 2` at top level) keeps its spelling."""
    path = _wizard_env / "settings.toml"
    before = (EXAMPLES / "seed_sdxl_fsdp2.toml").read_text()
    app = make_app(path, before, tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f3")
        await choose(pilot, "in-strategy", "fsdp1")  # the deprecated v1
        await pilot.press("ctrl+s")
        await pilot.pause()
    after = path.read_text()
    assert changed_lines(before, after) == ["-fsdp_version = 2", "+fsdp_version = 1"]
    result = compile_file(path)
    assert result.plan.strategy == "fsdp1"
    assert any(d.key == "fsdp.version" and "deprecated" in d.message for d in result.diagnostics.items)


async def test_untouched_file_saves_byte_identical(tmp_path, _wizard_env):
    path = _wizard_env / "settings.toml"
    shutil.copy(EXAMPLES / "zero3_nvme.toml", path)
    (_wizard_env / "offload").mkdir()
    before = path.read_text()
    app = make_app(path, tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        for key in ("f2", "f3", "f4", "f5", "f6"):
            await pilot.press(key)
        await pilot.press("ctrl+s")
        await pilot.pause()
    assert path.read_text() == before
