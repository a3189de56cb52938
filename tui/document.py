"""The settings file as an editable tomlkit document: canonical-key edits, comments kept.

The wizard edits one value at a time through canonical keys (``fsdp.version``). Where the
opened file already spells that setting some other way (a flat alias such as
``fsdp_version = 2`` at top level, or an alias inside its section), the edit goes to THAT
key in place, so opening a commented file, changing one value and saving changes one
line. tomlkit keeps comments, key order and every key the wizard never touched.

No Textual import here: this is plain Python, unit-tested on its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import Table

from ..compiler.keys.schema import index
from ..compiler.read.files import write_atomic


class SettingsDocument:
    """A tomlkit document plus the canonical-key view the compiler has of it."""

    def __init__(self, text: str = "") -> None:
        self.doc = tomlkit.parse(text)
        self.original_text = text

    # -- reading ----------------------------------------------------------------------

    def text(self) -> str:
        return tomlkit.dumps(self.doc)

    def plain(self) -> dict[str, Any]:
        """The document as plain Python data (what tomllib would give)."""
        return self.doc.unwrap()

    def has_tables(self) -> bool:
        return any(isinstance(v, Table) for v in self.doc.values())

    def locate(self, key: str) -> tuple[Any, str] | None:
        """(container, name) where `key` is written in the file, or None.

        Order follows the compiler's normalisation (normalise._Builder.take_file): the
        canonical name inside its section, an alias inside that section, then an alias at
        top level.
        """
        idx = index()
        info = idx.keys[key]
        table = self.doc.get(info.section)
        if isinstance(table, Table):
            if info.name in table:
                return table, info.name
            for alias in info.aliases:
                if alias in table:
                    return table, alias
        for alias in info.aliases:
            if alias in self.doc and not isinstance(self.doc[alias], Table):
                return self.doc, alias
        return None

    def is_written(self, key: str) -> bool:
        return self.locate(key) is not None

    def written_value(self, key: str) -> Any:
        """The value of `key` exactly as the file holds it (plain Python), or None where it is not written."""
        hit = self.locate(key)
        if hit is None:
            return None
        container, name = hit
        item = container[name]
        return item.unwrap() if hasattr(item, "unwrap") else item

    def written_name(self, key: str) -> str | None:
        """The key as the file spells it (``fsdp_version`` or ``fsdp.version``)."""
        hit = self.locate(key)
        if hit is None:
            return None
        container, name = hit
        return name if container is self.doc else f"{index().keys[key].section}.{name}"

    # -- editing ----------------------------------------------------------------------

    def set(self, key: str, value: Any) -> None:
        """Write `value` for canonical `key`, in place where the file already has it."""
        idx = index()
        info = idx.keys[key]
        value = _toml_value(value)
        hit = self.locate(key)
        if hit is not None:
            container, name = hit
            container[name] = value
            return
        # A purely flat file (the seeds' style) keeps its style: add the flat alias.
        if len(self.doc) and not self.has_tables() and info.aliases:
            self.doc[info.aliases[0]] = value
            return
        table = self.doc.get(info.section)
        if not isinstance(table, Table):
            table = tomlkit.table()
            self.doc[info.section] = table
        table[info.name] = value

    def remove(self, key: str) -> bool:
        hit = self.locate(key)
        if hit is None:
            return False
        container, name = hit
        del container[name]
        section = index().keys[key].section
        if container is not self.doc and not len(container) and section in self.doc:
            del self.doc[section]  # no empty [section] left behind
        return True

    # -- saving -----------------------------------------------------------------------

    def save(self, path: Path) -> Path:
        """Write atomically (`write_atomic`): never a half-written settings file."""
        text = self.text()
        path = write_atomic(path, text)
        self.original_text = text
        return path


def _toml_value(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        arr = tomlkit.array()
        arr.extend(value)
        return arr
    return value
