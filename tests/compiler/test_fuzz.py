"""Property-based: generated settings never make the compiler raise."""

from __future__ import annotations

import os
import tomllib

import tomlkit
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tuner.compiler.compile import compile_text
from tuner.compiler.keys.schema import index

IDX = index()
#: A campaign runs more: TUNER_FUZZ_SCALE=5 multiplies every count (docs/reliability.md).
SCALE = float(os.environ.get("TUNER_FUZZ_SCALE", "1"))
KEY_NAMES = sorted(IDX.aliases) + sorted(IDX.keys) + ["bogus", "fsdp_verison", "zero_stage "]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["2", "v2", "auto", "cpu", "nvme", "SHARDED_STATE_DICT", "bf16",
                                           "transformer", "a.b", ",", "LlamaDecoderLayer,", "-1", "1e9"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEY_NAMES + ["stage", "device", "type"]), inner, max_size=3)),
    max_leaves=8)


def _drop_none(v):
    if isinstance(v, dict):
        return {k: _drop_none(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_drop_none(x) for x in v if x is not None]
    return v


@settings(max_examples=int(300 * SCALE), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEY_NAMES + list(IDX.sections)), values, max_size=8))
def test_generated_settings_never_raise(data):
    try:
        text = tomlkit.dumps(_drop_none(data))
        tomllib.loads(text)
    except Exception:  # not representable as TOML (e.g. mixed arrays in old TOML); skip
        return
    result = compile_text(text)
    assert result.ok or result.diagnostics.errors  # a verdict either way, never an exception


@settings(max_examples=int(200 * SCALE), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KEY_NAMES), st.text(max_size=10)), max_size=5))
@example([("accelerate_config", "\x00")])  # found by hypothesis: a NUL byte in a path
@example([("deepspeed_config", "a\x00b"), ("offload_param_path", "\x00")])
def test_generated_overrides_never_raise(pairs):
    result = compile_text("", [f"{k}={v}" for k, v in pairs])
    assert result.ok or result.diagnostics.errors


@settings(max_examples=int(200 * SCALE), deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_never_raises(text):
    result = compile_text(text)
    assert result.ok or result.diagnostics.errors
