"""Issue 37, item 3: a file with an unknown key is fixed in the wizard (Review, Enter on the
diagnostic: remove it, or rename it to the compiler's did-you-mean), then saved, every comment
kept; the save refusal names the section (`[model]`, not eaten as markup)."""

from __future__ import annotations

import pytest
from tuner.compiler.compile import compile_file
from tuner.tui.model import SaveRefused, WizardState
from tuner.tui.unknown import UnknownKeyScreen, find, remove, rename

from .conftest import make_app

pytestmark = pytest.mark.tui

TEXT = """\
# Our 7B run (do not lose this comment)
[model]
# the family, misspelt
famly = "causal_lm"  # trailing comment on the bad key
path = "builtin:tiny-llama"  # the tiny model

[training]
# how long
max_steps = 5
"""


async def _fix(tmp_path, choice_keys: list[str]):
    path = tmp_path / "work" / "settings.toml"
    app = make_app(path, TEXT, tmp_path=tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("f6")  # Review: the diagnostics list has focus, the error first
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, UnknownKeyScreen), app.screen
        await pilot.press(*choice_keys)
        await pilot.pause()
        assert not isinstance(app.screen, UnknownKeyScreen)
        await pilot.press("ctrl+s")
        await pilot.pause()
    return path


async def test_an_unknown_key_is_removed_in_the_wizard_and_saved_with_the_comments(tmp_path, _wizard_env):
    path = await _fix(tmp_path, ["tab", "enter"])  # Rename (focused), Tab: Remove it, Enter
    text = path.read_text()
    assert "famly" not in text
    for comment in ("# Our 7B run (do not lose this comment)", "# the family, misspelt", "# the tiny model", "# how long"):
        assert comment in text
    assert text == TEXT.replace('famly = "causal_lm"  # trailing comment on the bad key\n', "")
    assert compile_file(path).ok


async def test_an_unknown_key_is_renamed_to_the_did_you_mean(tmp_path, _wizard_env):
    path = await _fix(tmp_path, ["enter"])  # "Rename to model.family" has focus
    assert path.read_text() == TEXT.replace("famly =", "family =")  # only the name changed
    assert compile_file(path).ok


def test_the_refusal_names_the_section_and_the_way_out(tmp_path):
    state = WizardState(tmp_path / "settings.toml", TEXT)
    with pytest.raises(SaveRefused) as refused:
        state.save()
    message = str(refused.value)
    assert "unknown key 'famly' in [model]" in message and "did you mean model.family" in message
    assert "Enter on it removes or renames it" in message


async def test_the_refusal_notice_keeps_the_section_name(tmp_path, _wizard_env):
    app = make_app(tmp_path / "work" / "settings.toml", TEXT, tmp_path=tmp_path)
    async with app.run_test(size=(100, 40), notifications=True) as pilot:
        await pilot.press("ctrl+s")
        await pilot.pause()
        await pilot.pause()
        shown = " ".join(str(t.render()) for t in app.screen.query("Toast"))  # as drawn
        shown = shown.replace("\n", " ")
    assert "the first [model.famly] unknown key 'famly' in [model]" in shown, shown


def test_a_suggestion_in_another_section_moves_the_value_there(tmp_path):
    text = "# keep me\ngradient_chekpointing = true  # c\n[training]\nseed = 3\n"
    state = WizardState(tmp_path / "settings.toml", text)
    found = find(state.diagnostics, "gradient_chekpointing")
    assert found is not None and found.suggestions[0] == "training.gradient_checkpointing"
    fixed = rename(state.document, found, "training.gradient_checkpointing").text()
    assert "# keep me" in fixed and "gradient_checkpointing = true" in fixed and "chekpointing" not in fixed
    assert remove(state.document, found).text() == "# keep me\n[training]\nseed = 3\n"
