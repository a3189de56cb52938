"""Property-based: hostile inputs of every kind end in a verdict, never a traceback.

Five generators, about 2,300 cases in all, run in-process (a compile takes milliseconds):

* mutations of every bundled example (hostile values, dropped, duplicated and cut lines),
* raw DeepSpeed tables (inline, or as a JSON file, NaN included),
* base accelerate YAMLs (unknown and non-string keys, wrong block types, hostile YAML),
* model ``config.json`` files (strings for sizes, huge and negative counts),
* whole command lines for the commands that start no ranks.

Every result is a `CompileResult` (never an exception); every command exits with a code from
the README's table, never EXIT_INTERNAL, never with a traceback. Every exit-0 artefact set is
checked with accelerate's own config loader, and the DeepSpeed JSON of a sample of them with
DeepSpeed's own `DeepSpeedConfig` (the upstream code, not tuner's reading of the files).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import tomlkit
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tuner.compiler.compile import compile_text

from tests.reliability.rel_helpers import EXAMPLES, assert_honest, tuner

#: Raw DeepSpeed tables are the `art-ds` work's part of issue 11 (compiler/plan/deepspeed_config.py):
#: today a wrong nested type (``offload_optimizer = 1``, ``params`` that is not a table) still
#: crashes the compile (in the estimate's and the builder's reading of the raw config), and a
#: removed key (``amp``, ``mics_shard_size``) or a mistyped value compiles but DeepSpeed's own
#: parser refuses the artefact. While this flag is True exactly those two outcomes are
#: tolerated, and only for raw DeepSpeed tables; the integrator sets it to False once that work
#: is merged, and the generator then fails on any of them again.
TOLERATE_KNOWN_DEEPSPEED_CRASHES = False
_DS_TABLES = {"zero_optimization", "offload_optimizer", "offload_param", "optimizer", "scheduler", "params",
              "bf16", "fp16"}

HOSTILE_TOML_VALUES = [
    "inf", "-inf", "nan", "+nan", "1e19", "-1", "0", "true", "false", "3.0", "2.5", '"x"', "[]", "{}", '""',
    '"/dev/zero"', "99999999999999999999", "9007199254740993", '"auto"', '[1, "a"]', "{a = {b = {c = 1}}}",
    '"v2"', '"SHARDED_STATE_DICT"', '"cpu"', '"nvme"', "1979-05-27", '"\\u0000"', '"~nobody/x"', "[[1], [2]]",
]
SETTINGS_KEYS = ["fsdp_version", "zero_stage", "num_processes", "micro_batch_size", "gpu_memory_gib",
                 "learning_rate", "deepspeed_config", "base", "dynamo_backend", "mixed_precision",
                 "transformer_layer_cls_to_wrap", "offload_optimizer", "seq_len", "path", "enabled", "size"]
EXAMPLE_TEXTS = {p.name: p.read_text(encoding="utf-8") for p in sorted(EXAMPLES.glob("*.toml"))}
#: Generated cases per generator; the issue asks for at least 2,000 per suite run.
CASES = {"examples": 800, "deepspeed": 500, "base": 300, "model": 300, "commands": 400}
#: A campaign runs more: TUNER_FUZZ_SCALE=5 multiplies every count (docs/reliability.md).
CASES = {k: int(v * float(os.environ.get("TUNER_FUZZ_SCALE", "1"))) for k, v in CASES.items()}


def cases(name: str) -> settings:
    # In CI the cases are a fixed sequence (a gate a pipeline can reproduce); on a developer's
    # machine each run explores new ones (how the overflow and the "auto" blocks were found).
    return settings(max_examples=CASES[name], deadline=None, suppress_health_check=list(HealthCheck),
                    derandomize=os.environ.get("CI", "").lower() in ("1", "true"))


def _no_nan(name: str):
    raise ValueError(f"{name} in JSON")


class _Artefacts:
    """Exit-0 results: accelerate's loader on each, DeepSpeed's parser on a sample."""

    deepspeed_checked = 0
    deepspeed_limit = 40

    @classmethod
    def check(cls, result, workdir: Path) -> None:
        for name, text in result.files.items():
            if name.endswith(".json"):
                json.loads(text, parse_constant=_no_nan)  # NaN/Infinity never reach JSON
        out = Path(tempfile.mkdtemp(dir=workdir))
        result.out_dir = out
        result.write()
        from tuner.runtime.verify import load_accelerate

        load_accelerate(out / "accelerate.yaml")
        if result.deepspeed_json and cls.deepspeed_checked < cls.deepspeed_limit:
            cls.deepspeed_checked += 1
            _parse_deepspeed(out / "deepspeed.json", result.settings.to_dict(), result.plan.data_parallel_size)


class DeepSpeedRefused(AssertionError):
    """An exit-0 deepspeed.json that DeepSpeed's own parser refuses."""


def _parse_deepspeed(path: Path, settings: dict, world: int) -> None:
    """DeepSpeed's own `DeepSpeedConfig` at the run's data-parallel size, after accelerate
    has filled the "auto" values as it does for a run of these settings. DeepSpeed's rank
    lookup is answered directly (as docs/interop-method.md allows) instead of starting a
    process group, which on CPU builds DeepSpeed's shared-memory op first (a minute or more)."""
    from unittest import mock

    import deepspeed.runtime.config as ds_config
    from tuner.runtime.verify import _WorldSize, accelerate_filled

    written = json.loads(path.read_text())
    with mock.patch.object(ds_config.dist, "get_rank", lambda *a, **k: 0):
        try:
            filled = accelerate_filled(written, settings, world)
            cfg = ds_config.DeepSpeedConfig(filled, mpu=_WorldSize(world))
        except Exception as exc:
            raise DeepSpeedRefused(f"DeepSpeed refuses {path}: {exc}") from exc
    # DeepSpeed derives a train_batch_size the file leaves out; one it states must hold
    assert cfg.train_batch_size == filled.get("train_batch_size", cfg.train_batch_size)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """Artefacts are written (and fsynced) thousands of times: in memory when /dev/shm allows."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        folder = Path(tempfile.mkdtemp(prefix="tuner-property-", dir=shm))
        yield folder
        shutil.rmtree(folder, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp("property")


def _compile(text: str, path: Path, workdir: Path) -> None:
    result = compile_text(text, path=path, out_dir=workdir / "unused")
    assert result.ok or result.diagnostics.errors, "neither artefacts nor errors"
    if result.ok:
        _Artefacts.check(result, workdir)


def test_unmutated_examples_pass_the_upstream_parsers(workdir):
    """The baseline of generator 1, and proof that the upstream checks really run."""
    before = _Artefacts.deepspeed_checked
    for name, text in EXAMPLE_TEXTS.items():
        result = compile_text(text, path=EXAMPLES / name)
        if name == "fsdp2_context_parallel.toml" and not result.ok:
            continue  # CUDA-only: refused when this machine is the target
        assert result.ok, (name, [d.format() for d in result.diagnostics.errors])
        _Artefacts.check(result, workdir)
    assert _Artefacts.deepspeed_checked > before


# --- 1. mutations of every example ------------------------------------------------------

@st.composite
def mutated_example(draw):
    name = draw(st.sampled_from(sorted(EXAMPLE_TEXTS)))
    lines = EXAMPLE_TEXTS[name].splitlines()
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["value", "value", "insert", "drop", "duplicate", "cut"]))
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        if op == "value" and lines and "=" in lines[i]:
            lines[i] = lines[i].split("=", 1)[0] + "= " + draw(st.sampled_from(HOSTILE_TOML_VALUES))
        elif op == "insert":
            lines.insert(i, f"{draw(st.sampled_from(SETTINGS_KEYS))} = {draw(st.sampled_from(HOSTILE_TOML_VALUES))}")
        elif op == "drop" and lines:
            del lines[i]
        elif op == "duplicate" and lines:
            lines.insert(i, lines[i])
        elif op == "cut":
            text = "\n".join(lines)
            lines = text[: draw(st.integers(0, len(text)))].splitlines()
    return name, "\n".join(lines) + "\n"


@cases("examples")
@given(mutated_example())
def test_mutated_examples_never_raise(workdir, case):
    name, text = case
    _compile(text, EXAMPLES / name, workdir)


# --- 2. raw DeepSpeed tables --------------------------------------------------------------

DS_KEYS = ["zero_optimization", "stage", "offload_optimizer", "offload_param", "device", "params", "optimizer",
           "type", "scheduler", "bf16", "fp16", "enabled", "train_batch_size", "gradient_accumulation_steps",
           "train_micro_batch_size_per_gpu", "gradient_clipping", "amp", "mics_shard_size", "reduce_bucket_size",
           "nvme_path", "pin_memory", "lr", "warmup_num_steps", "stage3_gather_16bit_weights_on_model_save"]
ds_scalars = st.one_of(st.integers(-2, 4), st.sampled_from([2**40, 10**30]), st.booleans(),
                       st.floats(allow_nan=True, allow_infinity=True),
                       st.sampled_from(["auto", "cpu", "nvme", "none", "AdamW", "cpuadam", "WarmupLR", "", "x"]))
ds_values = st.recursive(ds_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(DS_KEYS), inner, max_size=4)), max_leaves=10)
ds_tables = st.dictionaries(st.sampled_from(DS_KEYS), ds_values, max_size=6)


def _known_art_ds_shape(node) -> bool:
    """A table holding one of DeepSpeed's blocks with a value that is not a table."""
    if isinstance(node, dict):
        return any((k in _DS_TABLES and not isinstance(v, dict)) or _known_art_ds_shape(v) for k, v in node.items())
    return isinstance(node, list) and any(_known_art_ds_shape(v) for v in node)


@cases("deepspeed")
@given(ds_tables, st.booleans(), st.integers(1, 4))
def test_raw_deepspeed_tables_never_raise(workdir, table, as_file, procs):
    settings_doc = {"hardware": {"platform": "cpu", "num_processes": procs}}
    if as_file:  # json.dumps writes NaN/Infinity tokens: the reader must refuse them
        path = Path(tempfile.mkstemp(suffix=".json", dir=workdir)[1])
        path.write_text(json.dumps(table), encoding="utf-8")
        settings_doc["deepspeed"] = {"config": str(path)}
    else:
        settings_doc["deepspeed"] = {"config": table}
    try:
        text = tomlkit.dumps(settings_doc)
    except (TypeError, ValueError):  # not expressible in TOML (empty keys, nested nulls)
        return
    try:
        _compile(text, workdir / "settings.toml", workdir)
    except DeepSpeedRefused:
        if not TOLERATE_KNOWN_DEEPSPEED_CRASHES:
            raise
    except Exception:
        if TOLERATE_KNOWN_DEEPSPEED_CRASHES and _known_art_ds_shape(table):
            return
        raise


# --- 3. base accelerate YAMLs ---------------------------------------------------------------

BASE_KEYS = ["compute_environment", "distributed_type", "num_processes", "mixed_precision", "fsdp_config",
             "deepspeed_config", "dynamo_config", "dynamo_backend", "gpu_ids", "use_cpu", "bogus_key",
             "main_process_port", "downcast_bf16", "fp16", "megatron_lm_config", "tpu_env"]
yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**40), st.floats(allow_nan=True),
                         st.sampled_from(["LOCAL_MACHINE", "AMAZON_SAGEMAKER", "FSDP", "NO", "bf16", "all", "x"]))
yaml_values = st.recursive(yaml_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(BASE_KEYS + ["zero_stage"]), inner, max_size=3)),
    max_leaves=8)
RAW_YAMLS = ["a: &x [1]\nb: *x\n", "a: &x\n  - *x\n", "- 1\n- 2\n", "compute_environment: LOCAL_MACHINE\n1: 2\n",
             "{" * 300, "a:\n" + "".join("  " * i + "- \n" for i in range(200)), "a: !!binary aGk=\n",
             "\tkey: 1\n", "a: !!python/object:os.system {}\n", "", "~\n", "yes: no\n"]


@cases("base")
@given(st.one_of(st.dictionaries(st.one_of(st.sampled_from(BASE_KEYS), st.integers(0, 3)), yaml_values, max_size=6),
                 st.sampled_from(RAW_YAMLS)),
       st.sampled_from(["ddp", "fsdp", "zero"]))
def test_base_yamls_never_raise(workdir, base, strategy):
    text = base if isinstance(base, str) else yaml.safe_dump(base)
    path = Path(tempfile.mkstemp(suffix=".yaml", dir=workdir)[1])
    path.write_text(text, encoding="utf-8")
    extra = {"ddp": "", "fsdp": "[fsdp]\nenabled = true\n", "zero": "[deepspeed]\nenabled = true\n"}[strategy]
    settings_text = f'[hardware]\nplatform = "cpu"\nnum_processes = 2\n{extra}[accelerate]\nbase = "{path}"\n'
    _compile(settings_text, workdir / "settings.toml", workdir)


# --- 4. model config.json files ----------------------------------------------------------------

config_numbers = st.one_of(st.integers(-3, 4096), st.sampled_from([0, 10**6, 10**9, 2**63, 10**30]),
                           st.sampled_from(["64", "x", "", "1e3"]), st.floats(allow_nan=True, allow_infinity=True),
                           st.none(), st.booleans(), st.lists(st.integers(0, 4), max_size=2))
model_configs = st.fixed_dictionaries(
    {"model_type": st.sampled_from(["llama", "gpt2", "bert", "qwen3", "mistral", "mixtral", "unknown", 5])},
    optional={k: config_numbers for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                                         "intermediate_size", "num_key_value_heads", "head_dim", "n_embd", "n_layer",
                                         "num_local_experts", "max_position_embeddings", "type_vocab_size")}
    | {"tie_word_embeddings": st.booleans(), "_class_name": st.sampled_from(["UNet2DConditionModel", "X"])})


@cases("model")
@given(model_configs, st.sampled_from(["ddp", "fsdp", "zero3"]))
def test_model_configs_never_raise(workdir, config, strategy):
    model = Path(tempfile.mkdtemp(dir=workdir))
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    extra = {"ddp": "", "fsdp": '[fsdp]\nenabled = true\ntransformer_layer_cls_to_wrap = ["LlamaDecoderLayer"]\n',
             "zero3": "[deepspeed]\nenabled = true\nzero_stage = 3\n"}[strategy]
    text = (f'[model]\npath = "{model}"\n[hardware]\nplatform = "cuda"\nnum_processes = 2\n'
            f"gpu_memory_gib = 24\n{extra}")
    _compile(text, workdir / "settings.toml", workdir)


# --- 5. command lines -------------------------------------------------------------------------

def _paths(workdir: Path) -> list[str]:
    (workdir / "empty.toml").write_text("", encoding="utf-8")
    (workdir / "bad.json").write_text('{"a": NaN', encoding="utf-8")
    (workdir / "a_dir").mkdir(exist_ok=True)
    return [str(EXAMPLES / "zero1.toml"), str(EXAMPLES / "fsdp2.toml"), str(workdir / "empty.toml"),
            str(workdir / "bad.json"), str(workdir / "a_dir"), str(workdir / "missing.toml"), "/dev/null",
            str(EXAMPLES)]


TOKENS = ["--out", "-o", "--set", "--format", "json", "text", "--force", "--quiet", "--json", "--resume", "latest",
          "--max-steps", "0", "-1", "x", "fsdp_version=3", "zero_stage=true", "learning_rate=inf",
          "--fsdp_version=2", "--num_processes=0", "deepspeed_config={a={b=1}}", "=", "", "--", "-", "\x00"]
COMMANDS = [["compile"], ["import"], ["schema"], ["estimate"], ["cache", "clear"], ["cache"], ["checkpoint"],
            ["checkpoint", "export"], ["run"], ["bogus"], []]


@cases("commands")
@given(st.sampled_from(COMMANDS), st.lists(st.one_of(st.sampled_from(TOKENS), st.sampled_from(range(8))), max_size=6))
def test_command_lines_end_honestly(workdir, command, tokens):
    paths = _paths(workdir)
    argv = list(command) + [paths[t] if isinstance(t, int) else t for t in tokens]
    if command == ["run"]:
        # `tuner run` on something it could train would start ranks: keep to refusals.
        argv = [a for a in argv if a not in paths[:3]]
    if command == ["import"]:
        argv += ["-o", str(workdir / "imported" / "settings.toml"), "--force"]
    if not command:
        argv = argv or ["--version"]
        if not argv[0].startswith("-"):
            return  # no command is the wizard
    if command in (["compile"], ["estimate"]):  # never write into the repository's examples/
        argv += ["--out", str(Path(tempfile.mkdtemp(dir=workdir)))] if command == ["compile"] else []
    try:
        code, out, err = tuner(*argv)
    except SystemExit as exc:  # argparse's --help/--version exit through SystemExit
        code, out, err = int(exc.code or 0), "", ""
    assert_honest(code, out, err, argv)


def test_the_generators_add_up_to_2000_cases():
    """The contract of this file: at least 2,000 generated cases per suite run."""
    assert sum(CASES.values()) >= 2000
