"""Model families: what is trained, on which data, with which loss.

The trainer (`tuner.runtime.trainer`) is family-agnostic; everything model-specific lives
behind the `Family` interface in `base.py`. Families are looked up by the settings key
``model.family`` and imported lazily, so a run only imports what it uses (a causal LM run
never imports diffusers) and a family whose module is missing gives a clear error.
"""

from __future__ import annotations

import importlib

from .base import Family, FamilyError

__all__ = ["Family", "FamilyError", "FAMILIES", "get_family"]

#: settings ``model.family`` -> "module:ClassName" under this package.
FAMILIES: dict[str, str] = {
    "causal_lm": "causal_lm:CausalLMFamily",
    "embedding": "embedding.family:EmbeddingFamily",
    "diffusion": "diffusion.family:DiffusionFamily",
}


def get_family(name: str) -> type[Family]:
    """The `Family` subclass for ``model.family`` = `name`.

    Raises `FamilyError` (a message for the user, no traceback needed) when the name is
    unknown or its module cannot be imported.
    """
    try:
        spec = FAMILIES[name]
    except KeyError:
        raise FamilyError(f"unknown model family {name!r}; known: {', '.join(sorted(FAMILIES))}") from None
    module_name, _, class_name = spec.partition(":")
    try:
        module = importlib.import_module(f"{__name__}.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"{__name__}.{module_name}":
            raise FamilyError(f"model family {name!r} is not available in this installation "
                              f"(module tuner.runtime.families.{module_name} is missing)") from None
        from ..extras import install_hint

        hint = install_hint((exc.name or "").split(".")[0]) or "pip install 'tuner-train[all]'"
        raise FamilyError(f"model family {name!r} needs {exc.name!r}, which is not installed: {hint}") from exc
    cls = getattr(module, class_name, None)
    if cls is None or not (isinstance(cls, type) and issubclass(cls, Family)):
        raise FamilyError(f"tuner.runtime.families.{module_name} does not define the Family subclass {class_name}")
    return cls
