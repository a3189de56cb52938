"""What the README names exists: every repository path, every `tuner` command and flag, every
link target (and its #anchor), every `pip install` line's distribution and extra."""

from __future__ import annotations

import re
import tomllib

import pytest
from tuner.commands.cli import build_parser

from tests.conftest import REPO, run_tuner

README = (REPO / "README.md").read_text(encoding="utf-8")
TOP = sorted(p.name for p in REPO.iterdir() if not p.name.startswith(".") or p.name == ".ci")
#: links to a section another change is writing (remove once the heading exists)
PENDING_ANCHORS = {"docs/runtime.md#data"}  # issue 21: the data formats `tuner run` reads


def _spans(text: str) -> list[str]:
    """Inline code and the lines of fenced code blocks."""
    fenced = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"```[a-z]*\n.*?```", "", text, flags=re.S))
    return inline + [line for block in fenced for line in block.splitlines()]


def _repo_paths(text: str) -> set[str]:
    tops = "|".join(re.escape(t) for t in TOP if (REPO / t).is_dir())
    found = set(re.findall(rf"(?<![\w./~$-])((?:{tops})/[\w./*-]*)", text))
    found |= set(re.findall(r"(?<![\w./-])(pyproject\.toml|README\.md)\b", text))
    return {p.rstrip(".") for p in found}


def test_every_repository_path_exists():
    paths = _repo_paths(README)
    assert len(paths) > 20  # the extraction still finds them
    missing = sorted(p for p in paths if not (list(REPO.glob(p)) if "*" in p else (REPO / p).exists()))
    assert not missing


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_and_anchor_resolves():
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", README):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = REPO / path if path else REPO / "README.md"
        if not file.exists():
            bad.append(target)
        elif anchor and target not in PENDING_ANCHORS:
            headings = re.findall(r"^#+ (.+)$", file.read_text(encoding="utf-8"), flags=re.M)
            if anchor not in {_slug(h) for h in headings}:
                bad.append(target)
    assert not bad


def _subparsers(parser):
    for action in parser._actions:  # noqa: SLF001 - argparse has no public view of its tree
        if action.__class__.__name__ == "_SubParsersAction":
            return action.choices
    return {}


def _commands() -> list[str]:
    return [s.replace("\\|", "|") for s in _spans(README) if re.match(r"tuner( |$)", s)]


def test_every_tuner_command_and_flag_exists():
    root = build_parser()
    commands = _commands()
    assert len(commands) > 20
    problems = []
    for command in commands:
        words = command.split()[1:]
        parser, name = root, "tuner"
        while words and _subparsers(parser) and re.fullmatch(r"[a-z]+", words[0]):
            choices = _subparsers(parser)
            if words[0] not in choices:
                problems.append(f"`{command}`: {name} has no command {words[0]!r}")
                break
            parser, name = choices[words[0]], f"{name} {words[0]}"
            words = words[1:]
        flags = set(parser._option_string_actions)  # noqa: SLF001
        flags |= set(re.findall(r"--?[a-zA-Z][\w-]*", parser.usage or ""))  # `launch -m`: read from its REMAINDER
        for word in words:
            for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", word):
                if flag not in flags:
                    problems.append(f"`{command}`: {name} has no option {flag}")
    assert not problems, "\n".join(problems)


def test_install_lines_name_this_distribution_and_its_extras():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    name, extras = project["name"], set(project["optional-dependencies"])
    named = re.findall(r"pip install '?([\w-]+)(?:\[([\w,]+)\])?", README)
    named += [(d, e) for d, e in re.findall(r"`'([\w-]+)\[([\w,]+)\]'`", README)]
    assert name != "tuner" and len(named) >= 7
    assert {d for d, _ in named} == {name}, named
    assert {x for _, e in named for x in e.split(",") if x} == extras
    assert project["scripts"] == {"tuner": "tuner.__main__:entry"}  # the command keeps its name


def test_install_hints_name_existing_extras():
    from tuner.runtime.extras import EXTRA_OF, TORCH_HINT, install_hint

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for package in [*EXTRA_OF, "torch"]:
        hint = install_hint(package)
        distribution, extra = re.search(r"pip install '([\w-]+)\[(\w+)\]'", hint).groups()
        assert distribution == project["name"] and extra in project["optional-dependencies"], hint
    assert project["name"] in TORCH_HINT


@pytest.mark.parametrize("section", ["accelerate", "fsdp"])
def test_schema_of_a_section_lists_its_keys(section):
    """`tuner schema accelerate` used to answer "unknown key; did you mean accelerate"."""
    proc = run_tuner("schema", section)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"[{section}]") and f"  {'base' if section == 'accelerate' else 'version'}  (" \
        in proc.stdout
    wrong = run_tuner("schema", section + "x")
    assert wrong.returncode == 2 and f"did you mean {section}" in wrong.stderr
    assert f"{section!r}; did you mean {section} " not in wrong.stderr
