"""The one declaration (compiler/keys/sections/) is what emit, the importer and normalise use:
accelerate's names and value spellings are declared once per key, and both directions
(settings -> accelerate YAML -> settings) come from that one fact."""

from __future__ import annotations

import pytest
import yaml
from tuner.compiler.compile import compile_file
from tuner.compiler.formats import accelerate as accelerate_format
from tuner.compiler.keys.schema import accelerate_names, index

from tests.conftest import EXAMPLES


def _with_values():
    return [(p, i.setting.accelerate_values) for p, i in index().keys.items() if i.setting.accelerate_values]


@pytest.mark.parametrize("path,values", _with_values(), ids=[p for p, _ in _with_values()])
def test_accelerate_value_spellings_read_back_to_the_canonical_value(path, values):
    """emit writes accelerate's spelling; the key's declared spellings read it back."""
    normalise_value = index().keys[path].setting.spellings
    for canonical, written in values.items():
        assert normalise_value(written) == canonical, f"{path}: {written!r} does not read back as {canonical!r}"


def test_the_importer_reads_exactly_the_declared_accelerate_names():
    assert accelerate_format.FSDP_KEYS.items() <= accelerate_names("fsdp_config").items()
    assert accelerate_format.DS_YAML_KEYS == accelerate_names("deepspeed_config")
    assert accelerate_format.TOP.items() <= accelerate_names("").items()
    assert set(accelerate_format.CP_KEYS) == set(accelerate_names("parallelism_config"))


@pytest.mark.parametrize("example", ["fsdp2", "fsdp2_context_parallel", "zero3_nvme"])
def test_every_emitted_setting_name_is_declared(example, monkeypatch):
    """Each key of the accelerate YAML's fsdp_config, and each parallelism_config_cp_* key,
    is a declared `accelerate=` name: a new emitted key needs its declaration (and so the
    importer reads it back)."""
    monkeypatch.setenv("TUNER_PLATFORM", "cuda")
    result = compile_file(EXAMPLES / f"{example}.toml", out_dir=EXAMPLES / "build")
    assert result.ok, [d.format() for d in result.diagnostics.errors]
    cfg = yaml.safe_load(result.files["accelerate.yaml"])
    assert set(cfg.get("fsdp_config", {})) <= set(accelerate_names("fsdp_config"))
    cp = {k for k in cfg.get("parallelism_config", {}) if k.startswith("parallelism_config_cp_")}
    assert cp <= set(accelerate_names("parallelism_config"))
    for name, path in accelerate_names("").items():
        if name in cfg:
            section, key = path.split(".")
            assert cfg[name] == getattr(getattr(result.settings, section), key), name


def test_a_key_declares_its_step_only_where_it_leaves_its_sections():
    """A section class declares the wizard step of its keys (``step``); a key says ``step=``
    only where it sits on another step, so that the section -> step map is written once."""
    from tuner.compiler.keys.declare import declared, sections
    from tuner.compiler.keys.settings import Settings
    from tuner.tui.layout import STEP_IDS

    for name, cls in sections(Settings).items():
        assert getattr(cls, "step", None) in STEP_IDS[:-1], f"[{name}] declares no wizard step"
    repeated = [k.path for k in declared(Settings) if k.setting.step == sections(Settings)[k.section].step]
    assert not repeated, f"these keys repeat their section's step (remove step=): {repeated}"
    assert index().keys["fsdp.cpu_ram_efficient_loading"].step == "checkpoints"  # one that sits elsewhere
    assert index().keys["fsdp.version"].step == "sharding"


def _string_constants(tree) -> set[str]:
    import ast

    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_no_accelerate_key_name_is_typed_outside_the_declaration():
    """accelerate's name for a key is declared once, with the key (``accelerate=``): emit
    writes it from there and the importer reads it back through the same table. Outside the
    declaration and the importer's tables of other tools' names (compiler/formats/) no
    production module spells one; where accelerate's name is also one of tuner's own key
    names (num_processes), only emit is held to it."""
    import ast

    from tests.conftest import REPO
    from tests.packages import PACKAGE_FOLDERS

    infos = index().keys.values()
    names = {n.rpartition(".")[2] for info in infos for n in info.setting.accelerate}
    distinctive = names - {info.name for info in infos}
    assert "fsdp_version" in distinctive and "parallelism_config_cp_size" in distinctive
    found = {}
    for package in PACKAGE_FOLDERS:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith(("compiler/keys/sections/", "compiler/formats/")):
                continue
            hits = _string_constants(ast.parse(path.read_text())) & distinctive
            if hits:
                found[rel] = sorted(hits)
    assert not found, f"accelerate key names typed outside the declaration: {found}"
    # emit: not even the names that are tuner's own too, except in accelerate's own table of
    # every key its config loader accepts, and the manifest (tuner's topology record).
    tree = ast.parse((REPO / "compiler/artefacts/emit.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "manifest":
            continue
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "ACCELERATE_CONFIG_KEYS" for t in node.targets):
            continue
        assert not _string_constants(node) & names, f"emit.py line {node.lineno} spells {_string_constants(node) & names}"


def test_key_constants_are_the_declared_paths():
    """compiler/keys/paths.py: each constant is a declared key path, made from an attribute read on
    the typed settings; a path that is not declared fails when the constant is made."""
    from tuner.compiler.keys import paths as keys

    constants = {name: value for name, value in vars(keys).items() if name.isupper() and isinstance(value, str)}
    assert len(constants) > 40
    for name, path in constants.items():
        assert path in index().keys and name == path.replace(".", "_").upper(), name
    assert keys.key(lambda s: s.context_parallel.sp_size) == "context_parallel.sp_size"
    with pytest.raises(LookupError, match="fsdp.verison"):
        keys.key(lambda s: s.fsdp.verison)


def test_replaced_keys_are_not_live_keys():
    """A former key (`replaces=`) is an unknown key with a message: neither a declared key path nor an
    alias, and it names a key that exists; model.load_in_4bit is model.base_precision's."""
    idx = index()
    for written, (path, values) in idx.replaced.items():
        assert written not in idx.keys and written not in idx.aliases, written
        assert path in idx.keys and values, written
    assert idx.replaced["model.load_in_4bit"] == idx.replaced["load_in_4bit"] == (
        "model.base_precision", {True: "nf4-bnb", False: "no_change"})
