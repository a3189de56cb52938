"""`DataError`: data in the wrong shape, named by file, row and fix (exit 2, no traceback)."""

from __future__ import annotations

from ..families.base import FamilyError


class DataError(FamilyError):
    exit_code = 2

    def __init__(self, where: str, problem: str, fix: str = "") -> None:
        self.where, self.problem, self.fix = where, problem, fix
        text = f"{where}: {problem}" if where else problem
        super().__init__(text + (f"; {fix}" if fix else ""))
