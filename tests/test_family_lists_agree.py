"""The model families are still listed in several places (issue #14: "the family list five
times"): the settings schema's choices, the compiler's rule, block detection, the runtime's
family registry and the built-in models' defaults. Until they derive from one declaration,
this fails naming the list that drifted."""

from __future__ import annotations

import json
from pathlib import Path

from tuner.compiler.plan import rules
from tuner.compiler.read import builtin_models
from tuner.runtime import blocks, families

REPO = Path(__file__).resolve().parents[1]


def test_every_family_list_names_the_same_families():
    schema = json.loads((REPO / "schemas" / "settings.schema.json").read_text(encoding="utf-8"))
    lists = {
        "schemas/settings.schema.json model.family x-choices":
            schema["properties"]["model"]["properties"]["family"]["x-choices"],
        "compiler/plan/rules.py TRAINED_FAMILIES": rules.TRAINED_FAMILIES,
        "runtime/blocks.py FAMILIES": blocks.FAMILIES,
        "runtime/families/__init__.py FAMILIES": families.FAMILIES,
        "compiler/read/builtin_models.py DEFAULT_BY_FAMILY": builtin_models.DEFAULT_BY_FAMILY,
    }
    expected = set(families.FAMILIES)
    drifted = {where: sorted(names) for where, names in lists.items() if set(names) != expected}
    assert not drifted, f"family lists differ from the runtime's {sorted(expected)}: {drifted}"
