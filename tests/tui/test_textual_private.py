"""The private Textual names tuner uses exist in the installed Textual, whose version is one
they were checked on (tui/textual_private.py)."""

from __future__ import annotations

import textual
from tuner.tui.textual_private import CHECKED_VERSIONS, missing


def test_every_private_textual_name_exists():
    assert missing() == []


def test_the_installed_textual_is_a_checked_version():
    version = ".".join(textual.__version__.split(".")[:2])
    assert version in CHECKED_VERSIONS, (
        f"Textual {textual.__version__} is not among the versions tuner's private uses were checked on "
        f"({', '.join(CHECKED_VERSIONS)}): check each name in tui/textual_private.py, then add it")
