"""`conforms` (the compile's check before jsonschema) never passes what jsonschema refuses.

normalise skips jsonschema when `conforms` says the settings certainly satisfy the schema;
the diagnostics are jsonschema's, so a True here that jsonschema would refuse would hide an
error. Every key of the schema gets values of every JSON type, edge numbers, its enum's
members and near misses, and strings for its pattern.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from tuner.compiler.canonical.conforms import conforms
from tuner.compiler.compile import compile_text
from tuner.compiler.keys.schema import index

ZOO: list[Any] = [
    None, True, False, 0, 1, -1, 2, 7, 10**30, -(10**30), 0.0, 0.5, 1.0, 2.0, -0.5, 1e300, math.inf, -math.inf,
    math.nan, Decimal("1.5"), "", "x", "1", "true", "bf16", "no", "sharded", "a" * 300, "LlamaDecoderLayer",
    "host-1.example.com", "::1", "12:00:00", "1-02:03", "UNLIMITED", "A,B", "a_b", "/tmp/x", [], ["a"], [1], [0],
    ["a", 1], [True], {}, {"a": 1}, {"train_batch_size": 8},
]


def _values_for(prop: dict[str, Any]) -> list[Any]:
    values = list(ZOO)
    for member in prop.get("enum") or []:
        values += [member, str(member), member.upper() if isinstance(member, str) else member + 1 if
                   isinstance(member, int) and not isinstance(member, bool) else member]
    for bound in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if bound in prop:
            b = prop[bound]
            values += [b, b - 1, b + 1, float(b), b - 0.5, b + 0.5]
    return values


@pytest.fixture(scope="module")
def schema():
    return index().schema


def test_conforms_never_passes_what_jsonschema_refuses(schema):
    idx = index()
    assert conforms(idx.defaults(), schema), "the defaults conform: the usual compile skips jsonschema"
    assert Draft202012Validator(schema).is_valid(idx.defaults())
    checked = agreed = 0
    for info in idx.keys.values():
        # the key's own property: the other keys hold their (conforming) defaults
        assert schema["properties"][info.section]["properties"][info.name] is info.prop
        validator = Draft202012Validator(info.prop)
        for value in _values_for(info.prop):
            valid = validator.is_valid(value)
            if conforms(value, info.prop):
                assert valid, f"{info.path} = {value!r}: conforms, but jsonschema refuses it"
            checked += 1
            agreed += conforms(value, info.prop) == valid
    assert checked > 5000
    assert agreed > 0.95 * checked  # what it does not mirror (2.0 for an integer) is rare


def test_conforms_refuses_the_shapes_it_does_not_check(schema):
    idx = index()
    settings = idx.defaults()
    settings["nonsense"] = {}
    assert not conforms(settings, schema)  # additionalProperties at the top
    section = next(iter(idx.sections))
    settings = idx.defaults()
    settings[section]["nonsense"] = 1
    assert not conforms(settings, schema)
    assert not conforms(1, {"multipleOf": 2})  # a keyword it does not mirror: jsonschema decides
    assert not conforms(2.0, {"type": "integer"})  # jsonschema accepts it; this does not say so
    assert conforms(2, {"type": "integer", "minimum": 1, "x-aliases": ["n"], "description": "d"})


@pytest.mark.parametrize("text", [
    "",
    '[training]\nmicro_batch_size = "four"\nmixed_precision = "fp64"\n',
    "[training]\nmicro_batch_size = 2.0\nlearning_rate = -1\n",
    '[model]\nfamily = "llama"\ntype = "LoRA"\n[fsdp]\nenabled = true\nversion = "v2"\n',
    '[hardware]\nmain_process_ip = "not a host!"\n[cluster]\ntime = "soon"\n[checkpoint]\nstate_dict_type = 3\n',
])
def test_the_diagnostics_are_the_same_either_way(text, monkeypatch):
    """With or without the check first, a compile reports the same (jsonschema's words)."""
    from tuner.compiler.canonical import normalise

    fast = [d.format() for d in compile_text(text).diagnostics.items]
    monkeypatch.setattr(normalise, "conforms", lambda instance, schema: False)
    assert [d.format() for d in compile_text(text).diagnostics.items] == fast
