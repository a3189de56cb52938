"""Block detection: build a model from its configuration on the meta device and report
which module classes hold its parameters, so FSDP knows what to wrap.

Nothing is read but the config file and nothing is allocated: under ``torch.device("meta")``
every parameter is a shape without storage, so a 7B model "builds" in well under a second
and a few hundred MB of process memory (importing torch and transformers is most of the
time). Transformers checkpoints (``config.json`` with a ``model_type``), diffusers model
folders (``config.json`` with ``_class_name``; a pipeline folder is inspected through its
``unet/`` or ``transformer/``) and the built-in tiny configurations all work.

Public API (the wizard's detection modal and ``tuner blocks`` use these):

* `detect(model, family=None, flavour="", refresh=False) -> DetectionResult`: cached
  per family, checkpoint path and flavour in the user's cache directory
  (`tuner.compiler.read.block_cache`); ``refresh=True`` detects again.
* `build_model(model, family=None, flavour="", device="meta")`: the model itself, for
  callers that want a real (``device="cpu"``) or meta instance of the same configuration.
* `inspect(module)`: the per-class statistics of any ``torch.nn.Module``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..compiler.keys.choices import trained_family
from ..compiler.plan.rules import TRAINED_FAMILIES
from ..compiler.read import block_cache
from ..compiler.read import builtin_models as tiny_configs
from ..compiler.read.block_cache import ClassStat, DetectionResult

__all__ = ["DetectionError", "DetectionResult", "ClassStat", "ModelSpec", "resolve", "build_model",
           "inspect", "detect", "suggest_wrap_classes", "FAMILIES"]

FAMILIES = TRAINED_FAMILIES  # declared once, with model.family
_SAMPLE_PATHS = 3
_CONTAINERS = frozenset({"ModuleList", "ModuleDict", "ParameterList", "ParameterDict"})


class DetectionError(Exception):
    """A model that cannot be inspected; the message says why and what to do."""


@dataclass
class ModelSpec:
    """Where a model's configuration comes from and how to build it."""

    model: str
    family: str
    flavour: str
    library: str
    """``transformers`` or ``diffusers``."""
    config: dict[str, Any]
    class_name: str = ""
    """The diffusers class (``_class_name``), or the transformers architecture when known."""
    config_dir: Path | None = None
    config_file: Path | None = None
    fingerprint: str = ""
    builtin: str = ""
    notes: list[str] = field(default_factory=list)


def _infer_family(config: dict[str, Any], diffusers: bool) -> str:
    if diffusers:
        return "diffusion"
    archs = config.get("architectures") or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for a in archs):
        return "causal_lm"
    if config.get("model_type") in ("bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "electra",
                                    "deberta", "deberta-v2", "modernbert", "nomic_bert", "e5", "bge"):
        return "embedding"
    return "embedding" if archs and all(a.endswith(("Model", "ForMaskedLM")) for a in archs) else "causal_lm"


def resolve(model: str, family: str | None = None, flavour: str = "") -> ModelSpec:
    """Find the configuration for `model` (a directory, a config file or ``builtin[:NAME]``)."""
    model = str(model).strip()
    if family is not None and family not in FAMILIES:
        raise DetectionError(f"Unknown model_family {family!r}; supported: {', '.join(FAMILIES)}")
    packaged = tiny_configs.packaged_dir(model)
    if tiny_configs.is_builtin(model) and packaged is None:
        try:
            name = tiny_configs.resolve_name(model, family, flavour)
        except KeyError as exc:
            raise DetectionError(str(exc.args[0])) from None
        entry = tiny_configs.get(name)
        return ModelSpec(model=model, family=family or entry["family"], flavour=flavour, library=entry["library"],
                         config=entry["config"], class_name=entry["class_name"], builtin=name,
                         fingerprint=block_cache.builtin_sha256(entry["config"]))
    path = packaged or Path(model).expanduser()
    if not path.exists():
        raise DetectionError(f"model {model!r} not found: give a local model directory (with config.json) "
                             f"or a built-in ({', '.join('builtin:' + n for n in tiny_configs.names())})")
    cfg_file = block_cache.model_config_file(path, flavour)
    if cfg_file is None:
        raise DetectionError(f"{path} has no config.json (nor model_index.json with a unet/ or transformer/ folder)")
    from ..compiler.read.files import FileError, load_json

    try:
        config = load_json(cfg_file, "model config")
    except FileError as exc:
        raise DetectionError(exc.message) from None
    if not isinstance(config, dict):
        raise DetectionError(f"{cfg_file} is not a JSON object")
    is_diffusers = "_class_name" in config
    if not is_diffusers and "model_type" not in config:
        raise DetectionError(f"{cfg_file} has neither 'model_type' (transformers) nor '_class_name' (diffusers)")
    fam = family or _infer_family(config, is_diffusers)
    if fam == "diffusion" and not is_diffusers:
        raise DetectionError(f"{cfg_file} is a transformers config ({config.get('model_type')}); "
                             "the diffusion family needs a diffusers model folder (config.json with _class_name)")
    if fam != "diffusion" and is_diffusers:
        raise DetectionError(f"{cfg_file} is a diffusers {config['_class_name']} config; use --family diffusion")
    archs = config.get("architectures") or []
    return ModelSpec(model=model, family=fam, flavour=flavour, library="diffusers" if is_diffusers else "transformers",
                     config=config, class_name=config.get("_class_name") or (archs[0] if archs else ""),
                     config_dir=cfg_file.parent, config_file=cfg_file,
                     fingerprint=block_cache.file_sha256(cfg_file))


def _prepare(spec: ModelSpec):
    """Everything a build needs but the build itself: the libraries, the model class (a lazy
    attribute of diffusers, or transformers' auto mapping, imports its module here) and the
    config object. Returns a function that builds the model on a device, importing nothing."""
    import torch

    if spec.library == "diffusers":
        import diffusers

        cls = getattr(diffusers, spec.class_name, None)
        if cls is None or not hasattr(cls, "from_config"):
            raise DetectionError(f"diffusers has no model class {spec.class_name!r} "
                                 f"(diffusers {diffusers.__version__})")
        config = {k: v for k, v in spec.config.items() if not k.startswith("_") or k == "_class_name"}

        def build_diffusers(device: str):
            with torch.device(device):
                return cls.from_config(config)

        return build_diffusers
    import transformers
    from transformers import AutoConfig

    if spec.builtin:
        cfg = dict(spec.config)
        cfg_obj = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    else:
        cfg_obj = AutoConfig.from_pretrained(str(spec.config_dir))
    auto = transformers.AutoModelForCausalLM if trained_family(spec.family) == "causal_lm" else transformers.AutoModel
    try:
        auto._model_mapping[type(cfg_obj)]  # imports the modeling module now, not in the timed build
    except KeyError:
        pass  # from_config raises the library's own message in the build

    def build_transformers(device: str):
        with torch.device(device):
            return auto.from_config(cfg_obj)

    return build_transformers


def _config_validation_error() -> type[Exception]:
    """huggingface_hub's strict config dataclasses raise their own error (not a ValueError)
    for a field of the wrong type (``"hidden_size": "64"``)."""
    try:
        from huggingface_hub.errors import StrictDataclassError

        return StrictDataclassError
    except ImportError:  # an older huggingface_hub: its configs raise ValueError/TypeError
        return ValueError


def build_model(model: str, family: str | None = None, flavour: str = "", device: str = "meta"):
    """The model `model` describes, built on `device` (``meta``: no memory) from config only."""
    spec = model if isinstance(model, ModelSpec) else resolve(model, family, flavour)
    build = _guarded(spec, lambda: _prepare(spec))
    return _guarded(spec, lambda: build(device))


def _guarded(spec: ModelSpec, step):
    """`step()`, with a library's error turned into a `DetectionError` for the person.

    Builds run outside transformers' no_init_weights: it also skips tying (tied embeddings
    would count twice), and initialising meta tensors costs next to nothing anyway."""
    try:
        return step()
    except DetectionError:
        raise
    except (ValueError, KeyError, TypeError, OSError, AttributeError, ImportError, ArithmeticError,
            RuntimeError, _config_validation_error()) as exc:
        # A config the library cannot build (remote code, a newer model type, bad fields):
        # a message for the person, not a traceback.
        raise DetectionError(f"cannot build {spec.class_name or spec.library + ' model'} from "
                             f"{spec.config_file or spec.model}: {type(exc).__name__}: {exc}") from None


def inspect(module) -> tuple[list[ClassStat], dict[str, int], int]:
    """Per-class statistics, the parameter-size histogram and the parameter total.

    A module counts every parameter below it (its children's too), each parameter once
    (shared weights such as tied embeddings are not counted twice).
    """
    seen: set[int] = set()
    numels: Counter[int] = Counter()
    for p in module.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            numels[p.numel()] += 1
    total = sum(n * c for n, c in numels.items())

    stats: dict[str, ClassStat] = {}
    for path, sub in module.named_modules():
        cls = type(sub)
        if cls.__name__ in _CONTAINERS:
            continue  # a list of blocks is not a block; counting it would count them twice
        count = sum(p.numel() for p in sub.parameters())
        if count == 0:
            continue
        stat = stats.get(cls.__name__)
        if stat is None:
            stat = stats[cls.__name__] = ClassStat(cls.__name__, cls.__module__, 0, 0, 0, [])
        stat.parameters += count
        stat.occurrences += 1
        stat.per_instance = max(stat.per_instance, count)
        if len(stat.sample_paths) < _SAMPLE_PATHS:
            stat.sample_paths.append(path)
    ordered = sorted(stats.values(), key=lambda c: (-c.parameters, c.name))
    return ordered, {str(n): c for n, c in sorted(numels.items())}, total


def _list_children(module) -> set[str]:
    """Names of classes that appear as items of a ModuleList/Sequential (the repeated blocks)."""
    import torch

    out: set[str] = set()
    for sub in module.modules():
        if isinstance(sub, (torch.nn.ModuleList, torch.nn.Sequential)):
            out.update(type(child).__name__ for child in sub)
    return out


def _contains(module, outer: str, inner: set[str]) -> bool:
    """Whether some instance of class `outer` has an instance of a class in `inner` below it."""
    for sub in module.modules():
        if type(sub).__name__ == outer:
            if any(type(d).__name__ in inner for d in list(sub.modules())[1:]):
                return True
    return False


#: Models whose blocks cannot be FSDP units, and why (they are sharded as one unit).
NO_BLOCK_WRAP = {
    "DiTTransformer2DModel": "its forward calls into transformer_blocks[0] directly, outside the block's own call",
}


def suggest_wrap_classes(module, classes: list[ClassStat], no_split: list[str]) -> list[str]:
    """The classes to give FSDP's transformer wrap policy.

    1. The model's own ``_no_split_modules`` that it contains, repeated ones first (what
       accelerate wraps by default); containers of other suggested classes are dropped, so
       a UNet gets its ResNet and transformer blocks rather than the up/down blocks that
       hold them.
    2. Else the repeated blocks: classes held in a ModuleList/Sequential, occurring at
       least twice, that together hold at least 10% of the parameters; the outermost of
       them (a block's own feed-forward layers are not suggested beside the block).
    """
    if type(module).__name__ in NO_BLOCK_WRAP:
        return []
    by_name = {c.name: c for c in classes}
    total = max((c.parameters for c in classes), default=0)
    present = [n for n in no_split if n in by_name and by_name[n].parameters > 0]
    picked = [n for n in present if by_name[n].occurrences >= 2] or present
    if len(picked) > 1:
        picked = [n for n in picked if not _contains(module, n, set(picked) - {n})]
    if not picked:
        listed = _list_children(module)
        root = type(module).__name__
        picked = [c.name for c in classes
                  if c.name in listed and c.occurrences >= 2 and c.name != root
                  and c.parameters >= 0.1 * total and not c.module.startswith("torch.nn.")]
        if len(picked) > 1:
            picked = [n for n in picked if not any(_contains(module, o, {n}) for o in picked if o != n)]
    return sorted(picked, key=lambda n: (-by_name[n].parameters, n))


def _config_summary(spec: ModelSpec, module) -> dict[str, Any]:
    """The configuration as a plain dict (what the torch-free estimator reads)."""
    cfg = getattr(module, "config", None)
    if cfg is not None and hasattr(cfg, "to_dict"):
        data = cfg.to_dict()
    elif cfg is not None:
        data = dict(cfg)
    else:
        data = dict(spec.config)
    return json.loads(json.dumps(data, default=str))


def detect(model: str, family: str | None = None, flavour: str = "", refresh: bool = False,
           use_cache: bool = True) -> DetectionResult:
    """Detect (or read from the cache) the module classes of `model`.

    Raises `DetectionError` with a message for the user when the model cannot be found or
    built. The result is written to the cache (atomically) unless ``use_cache=False``.
    """
    spec = resolve(model, family, flavour)
    if use_cache and not refresh:
        cached = block_cache.get(spec.model, spec.family, spec.flavour)
        if cached is not None:
            return cached
    # Imports (the libraries and the model class's own module) and config parsing are most
    # of a detection's time: `_prepare` does them before the clock starts.
    build = _guarded(spec, lambda: _prepare(spec))
    start = time.perf_counter()
    module = _guarded(spec, lambda: build("meta"))
    classes, numels, total = inspect(module)
    no_split = list(getattr(module, "_no_split_modules", None) or [])
    suggested = suggest_wrap_classes(module, classes, no_split)
    by_name = {c.name: c for c in classes}
    result = DetectionResult(
        model=spec.model,
        family=spec.family,
        flavour=spec.flavour,
        library=spec.library,
        model_class=type(module).__name__,
        total_parameters=total,
        classes=classes,
        no_split_modules=sorted(no_split),
        suggested=suggested,
        param_numels=numels,
        largest_block_parameters=max((by_name[n].per_instance for n in suggested), default=0),
        config=_config_summary(spec, module),
        config_file=str(spec.config_file or ""),
        config_sha256=spec.fingerprint,
        seconds=round(time.perf_counter() - start, 3),
        warnings=list(spec.notes),
    )
    if use_cache:
        try:
            block_cache.put(result)
        except OSError as exc:
            result.warnings.append(f"could not write the detection cache: {exc}")
    return result
