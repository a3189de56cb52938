"""mypy sees the settings' values (issue 38): a key with closed choices has a `Literal` type
(`compiler/keys/choices.py`), so comparing it to a string outside its choices is a type error
under the project's own mypy configuration (``strict_equality``), and the settings are
frozen (assigning to them is one too). `closed_choices_fixture.py` holds the cases, each
expected error marked on its line; mypy runs through its API with pyproject.toml's settings.

mypy cannot follow the editable install's import hook, so it reads tuner through a tree of
symbolic links in the installed layout (as tests/test_lint.py does), in a temporary folder
with its own cache."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).with_name("closed_choices_fixture.py")
_MARK = re.compile(r"#\s*E:\s*(.+?)\s*$")


def _link_tree(root: Path) -> Path:
    """`root/tuner`: links to tuner's folders under their import names."""
    package_dir = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    top = root / "tuner"
    top.mkdir(parents=True)
    for entry in (REPO / "tuner").iterdir():
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry)
    for name, folder in package_dir.items():
        if folder != "tuner":
            (top / name.split(".")[1]).symlink_to(REPO / folder, target_is_directory=True)
    return root


def expected_errors(text: str) -> dict[int, str]:
    """Line number -> the part of mypy's message its ``# E:`` mark expects."""
    return {n: m.group(1) for n, line in enumerate(text.splitlines(), 1) if (m := _MARK.search(line))}


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory) -> dict[int, list[str]]:
    api = pytest.importorskip("mypy.api")
    tmp = tmp_path_factory.mktemp("mypy")
    tree = _link_tree(tmp / "tree")
    import os

    old = os.environ.get("MYPYPATH")
    os.environ["MYPYPATH"] = str(tree)
    try:
        out, err, _ = api.run(["--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(tmp / "cache"),
                               "--no-error-summary", "--show-error-codes", str(FIXTURE)])
    finally:
        if old is None:
            del os.environ["MYPYPATH"]
        else:
            os.environ["MYPYPATH"] = old
    found: dict[int, list[str]] = {}
    for line in out.splitlines():
        m = re.match(r"^(.+?):(\d+): error: (.*)$", line)
        assert m, f"mypy said something other than an error:\n{out}{err}"
        assert Path(m.group(1)).name == FIXTURE.name, f"mypy found an error outside the fixture:\n{out}"
        found.setdefault(int(m.group(2)), []).append(m.group(3))
    return found


def test_the_project_config_keeps_strict_equality():
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["strict_equality"] is True


def test_mypy_reports_exactly_the_marked_errors(mypy_errors):
    expected = expected_errors(FIXTURE.read_text())
    assert expected, "the fixture marks no error"
    missing = {n: want for n, want in expected.items() if not any(want in got for got in mypy_errors.get(n, []))}
    unexpected = {n: got for n, got in mypy_errors.items() if n not in expected}
    assert not missing, f"mypy did not report these (line: expected): {missing}; it reported {mypy_errors}"
    assert not unexpected, f"mypy reported errors on lines with no mark: {unexpected}"


def test_an_out_of_choices_string_is_a_non_overlapping_comparison(mypy_errors):
    lines = FIXTURE.read_text().splitlines()
    at = next(n for n, line in enumerate(lines, 1) if '== "fulll"' in line)
    assert any("Non-overlapping equality check" in e and "Literal['sharded', 'full']" in e
               for e in mypy_errors.get(at, [])), mypy_errors.get(at)
    valid = next(n for n, line in enumerate(lines, 1) if 'state_dict_type == "full",' in line)
    assert valid not in mypy_errors


def test_the_schemas_choices_are_read_from_the_types():
    """One truth: every ``enum`` of the schema is the `Literal` of the key's annotation, and a
    declaration cannot state choices beside its type."""
    import typing

    from tuner.compiler.keys.declare import declared, literal_choices, setting
    from tuner.compiler.keys.schema import load_schema
    from tuner.compiler.keys.settings import Settings

    closed = 0
    for key in declared(Settings):
        prop = load_schema()["properties"][key.section]["properties"][key.name]
        if "enum" not in prop:
            assert literal_choices(key.type) is None, key.path
            continue
        closed += 1
        args = [a for arm in typing.get_args(key.type) or (key.type,)
                for a in (typing.get_args(arm) if typing.get_origin(arm) is typing.Literal else (None,))]
        if typing.get_origin(key.type) is typing.Literal:
            args = list(typing.get_args(key.type))
        assert prop["enum"] == args == list(key.setting.choices or ()), key.path
    assert closed >= 20
    with pytest.raises(TypeError, match="Literal"):
        setting("a", "A key.", choices=("a", "b"))


def test_settings_are_built_frozen_for_every_reader():
    """One frozen type for compiler, runtime and wizard: `Settings.from_dict` (what the runtime
    reads a manifest with) and a default `Settings` refuse assignment in every section."""
    import dataclasses

    from tuner.compiler.keys.settings import Settings

    for s in (Settings(), Settings.from_dict({"training": {"max_steps": 3}})):
        for f in dataclasses.fields(s):
            section = getattr(s, f.name)
            first = dataclasses.fields(section)[0].name
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(s, f.name, section)
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(section, first, getattr(section, first))
