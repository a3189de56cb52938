"""Does an instance certainly conform to the settings schema? A check without jsonschema.

`normalise` validates the settings against the JSON Schema with jsonschema, whose import is
a tenth of a second: more than the rest of a compile, and paid before the wizard's first
paint. Valid settings are by far the usual case, so `conforms` answers for them first: True
only when every keyword of the schema is one it knows and the instance passes it, the
way jsonschema's Draft 2020-12 keywords check it. Anything else (a failed check, a keyword it
does not know, a value whose check it does not mirror, such as 3.0 for an integer) is False,
and then jsonschema itself validates and words the errors. So True means jsonschema would
find no error; the diagnostics are jsonschema's either way
(`tests/compiler/test_conforms.py` compares the two on every key).
"""

from __future__ import annotations

import re
from typing import Any

#: Keywords that never make an instance invalid (annotations); ``x-`` keywords are ignored too.
_ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "default", "examples",
                          "deprecated", "readOnly", "writeOnly"})

_NUMBER_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})


def conforms(instance: Any, schema: Any) -> bool:
    """True when `instance` certainly satisfies `schema` (see the module's docstring)."""
    if schema is True:
        return True
    if not isinstance(schema, dict):
        return False
    for keyword, arg in schema.items():
        if keyword in _ANNOTATIONS or keyword.startswith("x-"):
            continue
        if not _passes(keyword, arg, instance, schema):
            return False
    return True


def _is_type(name: str, instance: Any) -> bool:
    """jsonschema's type checks, less its integer-valued floats (not certain here: False)."""
    if name == "string":
        return isinstance(instance, str)
    if name == "boolean":
        return isinstance(instance, bool)
    if name == "integer":
        return isinstance(instance, int) and not isinstance(instance, bool)
    if name == "number":
        return isinstance(instance, (int, float)) and not isinstance(instance, bool)
    if name == "array":
        return isinstance(instance, list)
    if name == "object":
        return isinstance(instance, dict)
    if name == "null":
        return instance is None
    return False


def _passes(keyword: str, arg: Any, instance: Any, schema: dict[str, Any]) -> bool:
    if keyword == "type":
        return any(_is_type(name, instance) for name in (arg if isinstance(arg, list) else [arg]))
    if keyword == "enum":
        # jsonschema's equality tells True from 1; here only a member of the very same type counts
        return isinstance(arg, list) and type(instance) in (str, int, float, bool, type(None)) and any(
            type(each) is type(instance) and each == instance for each in arg)
    if keyword in _NUMBER_KEYWORDS:
        if isinstance(instance, bool) or not isinstance(instance, (int, float)):
            # jsonschema checks numbers only; a number of another class is not mirrored here
            return not _other_number(instance)
        if keyword == "minimum":
            return not instance < arg
        if keyword == "maximum":
            return not instance > arg
        if keyword == "exclusiveMinimum":
            return not instance <= arg
        return not instance >= arg
    if keyword == "pattern":
        return not isinstance(instance, str) or re.search(arg, instance) is not None
    if keyword == "properties":
        if not isinstance(instance, dict):
            return True
        return all(conforms(instance[name], sub) for name, sub in arg.items() if name in instance)
    if keyword == "additionalProperties":
        if not isinstance(instance, dict) or arg is True:
            return True
        if arg is not False or "patternProperties" in schema:
            return False
        known = schema.get("properties", {})
        return all(name in known for name in instance)
    if keyword == "items":
        if not isinstance(instance, list):
            return True
        return "prefixItems" not in schema and all(conforms(item, arg) for item in instance)
    return False  # a keyword not mirrored here: jsonschema decides


def _other_number(instance: Any) -> bool:
    """A number that is neither int nor float (Decimal, Fraction): jsonschema checks it, this does not."""
    import numbers

    return isinstance(instance, numbers.Number) and not isinstance(instance, (bool, int, float))
