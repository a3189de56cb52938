"""A value in the settings file that the compiler rejects is never replaced behind the
person's back. The compile falls back to the key's default to go on checking, but the field
shows what the file holds (a Select or Switch that cannot show it names it), the row shows the
compile's message, nothing is written back until the person edits that field, and ctrl+s
refuses (naming the error) with the file left byte for byte as it was. One case per widget
kind: a text field, a number in an Advanced part, a dropdown, a switch on the main part and
in an Advanced part, an inline table, a DeepSpeed config path.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from textual.widgets import Collapsible, Select, Static
from tuner.tui.fields import FieldRow

from .conftest import FAKE_FACTS, choose, make_app, type_into, widget

pytestmark = pytest.mark.tui

MODEL = '# the person\'s file\n[model]\npath = "builtin:tiny-llama"\n'

#: (id, the file, the step's key, the rejected key, what its input shows, the message)
CASES = [
    ("number", MODEL + "[training]\nseed = -1  # negative on purpose\n", "f5", "training.seed", "-1",
     "-1 is out of range (minimum 0)"),
    ("flat-alias", 'model_name = "builtin:tiny-llama"\nseed = -1\n', "f5", "training.seed", "-1",
     "-1 is out of range (minimum 0)"),
    ("dropdown", MODEL + '[training]\nmixed_precision = "fp7"\n', "f5", "training.mixed_precision", Select.NULL,
     'must be one of "no", "fp16", "bf16" (got "fp7")'),
    ("switch", MODEL + '[training]\ngradient_checkpointing = "maybe"\n', "f5", "training.gradient_checkpointing",
     False, 'must be true or false (got "maybe")'),
    ("switch-advanced", MODEL + "[training]\ntensorboard = 3\n", "f5", "training.tensorboard", False,
     "must be true or false (got 3)"),
    ("inline-table", MODEL + "[accelerate]\nparallelism_config = 5\n", "f2", "accelerate.parallelism_config", "5",
     "must be a table (got 5)"),
    ("deepspeed-config-path", MODEL + '[deepspeed]\nenabled = true\nconfig = "missing.json"\n', "f3",
     "deepspeed.config", "missing.json", "DeepSpeed config file not found"),
]


async def open_advanced(pilot) -> None:
    """Open the current step's Advanced part as a person does: Enter on its title."""
    pane = pilot.app.query_one("#switcher").visible_content
    box = pane.query_one(Collapsible)
    box.query_one("CollapsibleTitle").focus()
    await pilot.pause()
    await pilot.press("enter")
    await pilot.pause()
    assert not box.collapsed


def row_of(app, key: str) -> FieldRow:
    return app.screen.query_one(f"#row-{key.replace('.', '--')}", FieldRow)


def diagnostics_line(app, key: str) -> str:
    return str(row_of(app, key).query_one(".field-diags", Static).render())


def toasts(app) -> list[str]:
    """The notices as the screen shows them (their markup rendered: "\\[model]" shows "[model]")."""
    from rich.text import Text

    return [Text.from_markup(str(n.message)).plain for n in app._notifications]


@pytest.mark.parametrize("text,fkey,key,shows,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
async def test_a_rejected_value_is_shown_and_kept_and_saving_refuses(tmp_path, _wizard_env, text, fkey, key,
                                                                     shows: Any, message):
    path = _wizard_env / "settings.toml"
    app = make_app(path, text=text, tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        assert [d.key for d in app.state.errors] == [app.state.document.written_name(key)]
        await pilot.press(fkey)
        await pilot.pause()
        await open_advanced(pilot)  # builds every row of the step (the rejected one, wherever it is)
        field = widget(app, key)
        assert field.value == shows
        if isinstance(field, Select):  # it cannot show "fp7": blank, and its prompt names the value
            assert str(field.query_one("SelectCurrent #label").render()) == '(invalid: "fp7")'
        if field.__class__.__name__ == "Switch":  # off, and the words beside it name the value
            assert str(row_of(app, key).query_one(".switch-state", Static).render()).startswith("invalid: ")
        assert message in diagnostics_line(app, key) and row_of(app, key).has_class("has-error")
        assert app.state.document.text() == text and not app.state.dirty  # nothing written back
        await pilot.press("ctrl+s")
        await pilot.pause()
        refusal = toasts(app)[-1]
        assert refusal.startswith("Not saved: 1 error(s), the first [") and message in refusal, refusal
        await pilot.press("ctrl+r")  # the draft: the person's text as it is
        await pilot.pause()
    assert path.read_bytes() == text.encode()
    assert (_wizard_env / "settings.draft.toml").read_bytes() == text.encode()


async def test_editing_other_fields_leaves_the_rejected_values_as_written(tmp_path, _wizard_env):
    """Edits elsewhere (and ctrl+y, which reloads every field) write only what they change.
    (GPUs without bf16 here: on bf16 GPUs ctrl+y writes bf16 over "fp7", as the person asked.)"""
    path = _wizard_env / "settings.toml"
    rejected = 'seed = -1\nmixed_precision = "fp7"\ntensorboard = 3\n'
    text = MODEL + "[training]\n" + rejected
    facts = {**FAKE_FACTS, "gpus": [{**gpu, "bf16": False} for gpu in FAKE_FACTS["gpus"]]}
    app = make_app(path, text=text, tmp_path=tmp_path, facts=facts)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f5")
        await pilot.pause()
        await open_advanced(pilot)
        await type_into(pilot, "training.micro_batch_size", "4")
        await pilot.press("ctrl+y")  # the detected hardware values: every field is loaded again
        await pilot.pause()
        assert app.state.document.text().startswith(MODEL + "[training]\n" + rejected + "micro_batch_size = 4\n")
        assert widget(app, "training.seed").value == "-1"
        assert widget(app, "training.mixed_precision").value is Select.NULL
        assert str(row_of(app, "training.tensorboard").query_one(".switch-state", Static).render()) == "invalid: 3"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert toasts(app)[-1].startswith("Not saved: 3 error(s)")
    assert path.read_bytes() == text.encode()


async def test_the_persons_own_edit_replaces_a_rejected_value(tmp_path, _wizard_env):
    """Picking a choice, typing a number, flipping the switch: each writes that field, and then
    the file saves. The dropdown's blank (it was blank for "fp7") does not undo the choice."""
    path = _wizard_env / "settings.toml"
    app = make_app(path, text=MODEL + '[training]\nseed = -1\nmixed_precision = "fp7"\ntensorboard = 3\n',
                   tmp_path=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f5")
        await pilot.pause()
        await open_advanced(pilot)
        await choose(pilot, "training.mixed_precision", "bf16")
        select = widget(app, "training.mixed_precision")
        assert 'mixed_precision = "bf16"' in app.state.document.text() and select.prompt == "Select"
        select.value = Select.NULL  # the blank picked from the list: the file holds bf16, so it shows bf16
        await pilot.pause()
        assert select.value == "bf16" and 'mixed_precision = "bf16"' in app.state.document.text()
        await type_into(pilot, "training.seed", "7")
        widget(app, "training.tensorboard").focus()
        await pilot.press("space")
        await pilot.pause()
        assert str(row_of(app, "training.tensorboard").query_one(".switch-state", Static).render()) == "on"
        assert not app.state.errors, [d.format() for d in app.state.errors]
        await pilot.press("ctrl+s")
        await pilot.pause()
    assert path.read_text() == MODEL + '[training]\nseed = 7\nmixed_precision = "bf16"\ntensorboard = true\n'


async def test_a_template_with_a_rejected_choice_shows_it_in_the_builder_and_the_step(tmp_path, _wizard_env):
    """A loaded template holding a ZeRO stage outside the choices: the ZeRO stage dropdowns (built
    with a choice, so without a blank) are built again, blank and naming it, and nothing else
    rewrites it."""
    templates = tmp_path / "home" / "templates"
    templates.mkdir(parents=True)
    (templates / "odd.json").write_text(json.dumps({"deepspeed.zero_stage": 7}))
    path = _wizard_env / "settings.toml"
    app = make_app(path, text=MODEL + "[deepspeed]\nenabled = true\nzero_stage = 2\n", tmp_path=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f3")
        await pilot.pause()
        assert widget(app, "deepspeed.zero_stage").value == 2
        await pilot.press("f7")
        await pilot.pause()
        await pilot.press("ctrl+l")
        await pilot.pause()
        await pilot.pause()
        stage = app.screen.query_one("#in-deepspeed--zero_stage", Select)
        assert stage.value is Select.NULL and stage.prompt == "(invalid: 7)"
        await pilot.press("ctrl+o")
        await pilot.pause()
        await pilot.pause()
        stage = widget(app, "deepspeed.zero_stage")
        assert stage.value is Select.NULL and stage.prompt == "(invalid: 7)"
        assert "zero_stage = 7" in app.state.document.text()
        assert "must be one of 0, 1, 2, 3 (got 7)" in diagnostics_line(app, "deepspeed.zero_stage")


async def test_the_quick_start_boxes_show_the_files_rejected_values(tmp_path, _wizard_env):
    """F10's boxes start from the settings file: a rejected machine count shows as written, not as
    the default 1 the compile fell back to (which would also make GPUs per machine 16)."""
    from textual.widgets import Input

    path = _wizard_env / "settings.toml"
    text = MODEL + "[hardware]\nnum_machines = 0\nnum_processes = 16\ngpu_memory_gib = 40\n"
    app = make_app(path, text=text, tmp_path=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f10")
        await pilot.pause()
        boxes = {w.id: w.value for w in app.screen.query(Input)}
        assert boxes == {"qs-model": "builtin:tiny-llama", "qs-gpus": "", "qs-memory": "40", "qs-machines": "0"}
        await pilot.press("escape")
        await pilot.pause()
    assert path.read_text() == text
