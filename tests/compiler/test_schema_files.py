"""The JSON Schemas are generated from the one declaration (compiler/keys/sections/), and the
editor input schema accepts what `tuner compile` accepts.

* The committed schemas/*.schema.json are byte-for-byte what the generator writes: edit the
  declaration, then run `tuner schema --write` (the failure names the command).
* The input schema (schemas/settings.input.schema.json, what Taplo / Even Better TOML check a
  settings.toml with) accepts every example, the seeds' flat aliases (at top level and inside
  their section) and every forgiving spelling the declaration lists, each of which `tuner
  compile` also accepts; it refuses unknown keys, as `tuner compile` does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import tomlkit
from jsonschema import Draft202012Validator
from tuner.compiler.compile import compile_text
from tuner.compiler.keys import schema_gen
from tuner.compiler.keys.schema import index

from tests.conftest import EXAMPLES

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
INPUT_SCHEMA = SCHEMAS / schema_gen.INPUT_SCHEMA_FILE


@pytest.mark.parametrize("name", sorted(schema_gen.files()))
def test_committed_schema_file_is_the_generated_one(name):
    generated = schema_gen.files()[name]
    committed = (SCHEMAS / name).read_text(encoding="utf-8") if (SCHEMAS / name).is_file() else ""
    assert committed == generated, (f"schemas/{name} differs from the declaration (compiler/keys/sections/): "
                                    f"run `{schema_gen.REGENERATE}` and commit the result")


@pytest.mark.parametrize("name", sorted(schema_gen.files()))
def test_schema_is_valid_draft_2020_12(name):
    Draft202012Validator.check_schema(json.loads(schema_gen.files()[name]))


def _validator() -> Draft202012Validator:
    return Draft202012Validator(schema_gen.input_schema())


def _value_errors(text: str) -> list[str]:
    """`tuner compile`'s errors about keys and values (not the cross-field rules, which a
    lone key may trip, e.g. an NVMe offload with no path)."""
    result = compile_text(text)
    words = ("unknown key", "must be", "out of range", "set twice", "is not")
    return [d.format() for d in result.diagnostics.errors if any(w in d.message for w in words)]


def _toml(data: dict) -> str:
    return tomlkit.dumps(data)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.stem)
def test_every_example_validates_against_the_input_schema(path):
    errors = [e.message for e in _validator().iter_errors(tomllib.loads(path.read_text(encoding="utf-8")))]
    assert not errors, f"{path.name}: {errors}"


def test_every_example_names_the_input_schema():
    for path in sorted(EXAMPLES.glob("*.toml")):
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first == f"#:schema ../schemas/{schema_gen.INPUT_SCHEMA_FILE}", path.name


def _written_forms():
    """(TOML document, what it shows) for every key, placed every way tuner reads it, with
    every spelling its declaration (or its type) accepts."""
    for path, info in index().keys.items():
        s = info.setting
        value = info.default
        if path == "deepspeed.config":
            value = {"zero_optimization": {"stage": 2}}
        if value is None:  # unset (TOML has no null): a value it may be set to
            value = next((c for c in s.choices or () if c is not None), True)
        yield {info.section: {info.name: value}}, f"{path} canonical"
        for alias in s.aliases:
            yield {alias: value}, f"{path} as top-level alias {alias}"
            yield {info.section: {alias: value}}, f"{path} as [{info.section}] {alias}"
        spellings = list(getattr(s.spellings, "table", {}))
        spellings += [str(c) for c in (s.choices or ()) if c is not None]
        for word in spellings:
            for form in (word.upper(), f"  {word.title()} "):
                yield {info.section: {info.name: form}}, f"{path} spelt {form!r}"
        types = info.prop["type"] if isinstance(info.prop["type"], list) else [info.prop["type"]]
        if "boolean" in types:
            for form in ("yes", "Off", " TRUE "):
                yield {info.section: {info.name: form}}, f"{path} spelt {form!r}"
        if "integer" in types and isinstance(value, int) and not isinstance(value, bool) and value:
            yield {info.section: {info.name: f" {value} "}}, f"{path} as text"
        if types == ["number"]:
            yield {info.section: {info.name: f"{float(value or 1):e}"}}, f"{path} as exponent text"
        if "array" in types:
            form = "1, 2" if info.prop["items"]["type"] == "integer" else "A, B"
            yield {info.section: {info.name: form}}, f"{path} as comma-separated text"


def test_the_input_schema_accepts_what_compile_accepts():
    validator = _validator()
    checked = 0
    for data, what in _written_forms():
        text = _toml(data)
        assert not _value_errors(text), f"compile refuses {what}: {_value_errors(text)}"
        errors = [e.message for e in validator.iter_errors(data)]
        assert not errors, f"the input schema refuses {what} (which tuner compile accepts): {errors}"
        checked += 1
    assert checked > 400


UNKNOWN = [
    ("top-level typo", {"fsdp_versoin": 2}),
    ("key typo in a section", {"fsdp": {"enabeld": True}}),
    ("an alias in another section", {"fsdp": {"zero_stage": 2}}),
    ("an unknown section", {"fsdb": {"enabled": True}}),
]


@pytest.mark.parametrize("data", [d for _, d in UNKNOWN], ids=[w for w, _ in UNKNOWN])
def test_unknown_keys_are_refused_by_the_input_schema_and_by_compile(data):
    assert list(_validator().iter_errors(data)), "the input schema accepts an unknown key"
    assert any("unknown key" in e for e in _value_errors(_toml(data))), "tuner compile accepts an unknown key"


@pytest.mark.parametrize("data", [{"fsdp": {"version": "v3"}}, {"training": {"mixed_precision": "fp8"}},
                                  {"num_processes": "two"}, {"fsdp_enable": "maybe"}])
def test_a_wrong_value_is_refused_by_both(data):
    assert list(_validator().iter_errors(data))
    assert _value_errors(_toml(data))


def _taplo(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["taplo", "check", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(shutil.which("taplo") is None, reason="taplo is not installed (pip install 'tuner-train[test]')")
def test_taplo_checks_settings_files_with_the_input_schema(tmp_path):
    """The real Taplo CLI (what Even Better TOML runs): the examples pass through their own
    `#:schema` line; forgiving spellings pass; an unknown key fails."""
    done = _taplo(*sorted(str(p) for p in EXAMPLES.glob("*.toml")), cwd=EXAMPLES)
    assert done.returncode == 0, done.stderr
    schema = f"file://{INPUT_SCHEMA}"
    good = tmp_path / "good.toml"
    good.write_text('fsdp_enable = "yes"\nfsdp_version = "v2"\nfsdp_state_dict_type = "SHARDED_STATE_DICT"\n'
                    '[training]\nmixed_precision = "BF16"\nlearning_rate = "1e-4"\noptimizer = "adamw_torch"\n'
                    '[model]\nlora_target_modules = "q_proj, v_proj"\n')
    assert not _value_errors(good.read_text())
    done = _taplo("--schema", schema, str(good), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("fsdp_versoin = 2\n")
    done = _taplo("--schema", schema, str(bad), cwd=tmp_path)
    assert done.returncode != 0 and "fsdp_versoin" in done.stderr
