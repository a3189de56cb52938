"""The wizard's model: steps, which fields each shows, the rules for moving on, validation.

Plain Python, no Textual import (tests exercise it directly; the widgets only render it).
The steps and fields themselves (from the schema) are in `layout.py`.
Everything the wizard says about validity comes from the compiler: every edit writes the
tomlkit document and re-runs `compile_text` on its text, exactly as `tuner compile` would
read the saved file. The field values are that compile's normalised settings: one
normalise per edit.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from ..compiler.compile import CompileResult, compile_text
from ..compiler.diagnostics import Diagnostic, Diagnostics
from ..compiler.keys import paths as K
from ..compiler.keys.choices import trained_family
from ..compiler.keys.schema import index
from ..compiler.keys.settings import global_batch as batch_of
from ..compiler.plan.strategy import Strategy, StrategyChoice, strategy_choice
from .document import SettingsDocument
from .layout import MERGED, STEP_IDS, STEPS, STRATEGY_KEYS, advanced_keys, canonical_key, key_info, step_of

#: What a new settings file starts with: FSDP2 is the default for full-model runs (the
#: seed's WebUI default). Written explicitly, so the file says what the compiler will do.
NEW_FILE = """\
# Written by the tuner wizard. `tuner compile settings.toml` turns it into accelerate.yaml,
# deepspeed.json (when DeepSpeed is on) and manifest.json.
[model]
family = "causal_lm"
path = "builtin:tiny-llama"
type = "full"

[hardware]
num_processes = 1

[fsdp]
enabled = true
"""


def fsdp_version(choice: StrategyChoice) -> int | None:
    """The FSDP version a wizard strategy choice (ddp, fsdp1, fsdp2, deepspeed) names, else None."""
    return Strategy.chosen(choice).fsdp_version


class WizardState:
    """The document being edited, its last compile, and where the person is."""

    def __init__(self, path: Path, text: str | None = None, hardware: Any = None) -> None:
        self.path = Path(path).absolute()
        self.existed = text is not None
        self.document = SettingsDocument(text if text is not None else NEW_FILE)
        self.step = 0
        self.hardware = hardware
        """HardwareFacts from tuner doctor once detected (None until then)."""
        self.values: dict[str, Any] = {}
        self.result: CompileResult = CompileResult(Diagnostics())  # until validate() compiles the text
        self.saved_text = text
        self.validate()

    @classmethod
    def open(cls, path: Path) -> WizardState:
        path = Path(path)
        text = path.read_text(encoding="utf-8") if path.exists() else None
        return cls(path, text)

    # -- validation -------------------------------------------------------------------

    def validate(self) -> CompileResult:
        """Re-run the compiler on the in-memory text (what saving would write)."""
        self.result = compile_text(self.document.text(), path=self.path)
        self.values = self._normalised(self.result)
        return self.result

    @staticmethod
    def _normalised(result: CompileResult) -> dict[str, Any]:
        """Every key's value as the compile normalised it (the defaults when the text does not parse)."""
        idx = index()
        n = result.normalised
        if n is None:
            defaults = idx.defaults()
            return {k: defaults[info.section][info.name] for k, info in idx.keys.items()}
        # copies: a widget that edits a list in place must not edit the compile's settings
        return {k: copy.deepcopy(n.settings[info.section][info.name]) for k, info in idx.keys.items()}

    @property
    def diagnostics(self) -> list[Diagnostic]:
        return self.result.diagnostics.items

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    def diagnostics_for(self, key: str) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.key and canonical_key(d.key) == key]

    def step_errors(self, step_id: str) -> list[Diagnostic]:
        return [d for d in self.errors if step_of(d.key) == step_id]

    @property
    def dirty(self) -> bool:
        return self.document.text() != (self.saved_text if self.saved_text is not None else "")

    # -- values -----------------------------------------------------------------------

    def value(self, key: str) -> Any:
        return self.values[key]

    def shown(self, key: str) -> Any:
        """What `key`'s field shows: the compile's value, except where that is not what the file
        holds. A value the compile rejected falls back to the default (`Normalised.invalid`), and a
        `deepspeed.config` that names a file reads as its JSON; there the field shows the file's own
        value, so it never shows, or writes back, a value the person did not write."""
        n = self.result.normalised
        if n is not None and (key in n.invalid or key == K.DEEPSPEED_CONFIG) and self.document.is_written(key):
            written = self.document.written_value(key)
            if key in n.invalid or isinstance(written, str):
                return written
        return self.values[key]

    def set(self, key: str, value: Any) -> bool:
        """Set canonical `key`; returns False (and writes nothing) when nothing changes."""
        current = self.values.get(key)
        if value == current and type(value) is type(current) and not any(
                d.severity == "error" for d in self.diagnostics_for(key)):
            # Widgets echo values back on mount: never write what is already so. But an invalid
            # value in the file (a cleared field's "") reads as the default, and typing the
            # default must replace it.
            return False
        self.document.set(key, value)
        self.validate()
        return True

    def set_many(self, values: dict[str, Any]) -> bool:
        changed = False
        for key, value in values.items():
            changed |= self.set(key, value)
        return changed

    @property
    def strategy(self) -> StrategyChoice:
        """The strategy the values choose (as the rules stage reads them: DeepSpeed first)."""
        if self.values[K.DEEPSPEED_ENABLED] or self.values[K.DEEPSPEED_CONFIG]:
            return "deepspeed"
        if self.values[K.FSDP_ENABLED]:
            return Strategy.fsdp(1 if self.values[K.FSDP_VERSION] == 1 else 2).choice
        return "ddp"

    def set_strategy(self, name: StrategyChoice) -> bool:
        """Switch strategy; also repairs a file where several are on (the flags are made
        consistent even when `name` is what `strategy` already reads)."""
        edits: dict[str, Any] = {}
        if version := fsdp_version(name):
            edits = {K.DEEPSPEED_ENABLED: False, K.FSDP_ENABLED: True, K.FSDP_VERSION: version}
        elif name == "deepspeed":
            edits = {K.FSDP_ENABLED: False, K.DEEPSPEED_ENABLED: True}
        else:
            edits = {K.FSDP_ENABLED: False, K.DEEPSPEED_ENABLED: False}
        changed = False
        for key, value in edits.items():
            if value == key_info(key).default and not self.document.is_written(key):
                continue  # the default already; keep the file as small as it was
            if self.values.get(key) == value and self.document.is_written(key):
                continue
            self.document.set(key, value)
            changed = True
        if not fsdp_version(name) and self.values[K.FSDP_ACTIVATION_CHECKPOINTING]:
            # One concept: FSDP's activation checkpointing becomes training's, which every strategy runs.
            self.document.remove(K.FSDP_ACTIVATION_CHECKPOINTING)
            self.document.set(K.TRAINING_GRADIENT_CHECKPOINTING, True)
            changed = True
        if changed:
            self.validate()
        return changed

    def stray_strategy_keys(self) -> list[str]:
        """Keys (as the file spells them) of strategies other than the chosen one."""
        strategy = self.strategy
        other = {"deepspeed": ("fsdp.",), "ddp": ("fsdp.", "deepspeed."), "fsdp1": ("deepspeed.",),
                 "fsdp2": ("deepspeed.",)}[strategy]
        keep = {K.FSDP_ENABLED, K.DEEPSPEED_ENABLED}
        if fsdp_version(strategy):
            keep.add(K.FSDP_VERSION)
        out = []
        for key in index().keys:
            if key.startswith(other) and key not in keep and self.document.is_written(key):
                out.append(self.document.written_name(key) or key)
        both_on = self.values[K.FSDP_ENABLED] and strategy == "deepspeed"
        return out + ([K.FSDP_ENABLED] if both_on else [])

    def tidy_strategy(self) -> list[str]:
        """Remove the other strategies' keys (and switch their flags off); the names removed."""
        strays = self.stray_strategy_keys()
        if not strays:
            return []
        strategy = self.strategy
        prefixes = {"deepspeed": ("fsdp.",), "ddp": ("fsdp.", "deepspeed.")}.get(strategy, ("deepspeed.",))
        for key in index().keys:
            if key.startswith(prefixes) and key not in STRATEGY_KEYS:
                self.document.remove(key)
        if strategy == "deepspeed" and self.values[K.FSDP_ENABLED]:
            self.document.remove(K.FSDP_ENABLED)
            self.document.remove(K.FSDP_VERSION)
        self.validate()
        return strays

    def lr_schedule(self) -> str:
        """Which LR schedule the run will use, and where it comes from (DeepSpeed runs the
        scheduler its JSON names; otherwise the settings' training.lr_scheduler runs)."""

        if self.strategy == "deepspeed" and self.result.deepspeed_json:
            try:
                named = json.loads(self.result.deepspeed_json).get("scheduler")
            except ValueError:
                named = None
            if isinstance(named, dict) and named.get("type"):
                return f"schedule: {named['type']} (from deepspeed_config)"
        v = self.values
        warm = f", {v[K.TRAINING_WARMUP_STEPS]} warmup steps" if v[K.TRAINING_WARMUP_STEPS] else ""
        return f"schedule: {v[K.TRAINING_LR_SCHEDULER]}{warm} (from settings)"

    def bf16_default(self, facts: Any) -> bool:
        """A NEW file targeting this machine's CUDA GPUs that all support bf16 should train in
        bf16, not fp32 (`no`). Never for an existing file or a stated precision."""
        from .facts import _facts_dict

        if self.existed or facts is None or isinstance(facts, Exception):
            return False
        if self.document.is_written(K.TRAINING_MIXED_PRECISION):
            return False
        data = _facts_dict(facts)
        gpus = data.get("gpus") or []
        return (data.get("platform") == "cuda" and self.values[K.HARDWARE_PLATFORM] in ("auto", "cuda")
                and bool(gpus) and all(g.get("bf16") for g in gpus))

    def apply_proposal(self, edits: dict[str, Any]) -> None:
        """Apply the quick start's settings: the strategy first, then the keys it names."""
        edits = dict(edits)
        strategy = edits.pop("strategy", None)
        if strategy:
            self.set_strategy(strategy_choice(strategy))
        for key, value in edits.items():
            self.document.set(key, value)
        self.validate()

    @property
    def platform(self) -> str:
        """The target platform as the compiler resolved it (auto -> this machine)."""
        if self.result.plan is not None:
            return self.result.plan.platform
        return str(self.values.get(K.HARDWARE_PLATFORM, "auto"))

    @property
    def global_batch(self) -> tuple[int, str]:
        v = self.values
        plan = self.result.plan
        dp = plan.data_parallel_size if plan else v[K.HARDWARE_NUM_PROCESSES]
        total = plan.global_batch_size if plan else batch_of(v[K.TRAINING_MICRO_BATCH_SIZE],
                                                             v[K.TRAINING_GRADIENT_ACCUMULATION_STEPS], dp)
        formula = (f"{v[K.TRAINING_MICRO_BATCH_SIZE]} micro × {v[K.TRAINING_GRADIENT_ACCUMULATION_STEPS]} accumulation"
                   f" × {dp} data-parallel ranks")
        return total, formula

    # -- which fields show ------------------------------------------------------------

    def visible(self, key: str) -> bool:
        v = self.values
        written = self.document.is_written(key)
        strategy = self.strategy
        if key.startswith("model.lora_"):
            return v[K.MODEL_TYPE] == "lora" or written
        if key in (K.MODEL_POOLING, K.MODEL_MRL_DIMS, K.MODEL_TEMPERATURE):
            return trained_family(v[K.MODEL_FAMILY]) == "embedding" or written
        if key == K.DATA_SEQ_LEN:
            return trained_family(v[K.MODEL_FAMILY]) != "diffusion" or written
        if key == K.DATA_RESOLUTION:
            return trained_family(v[K.MODEL_FAMILY]) == "diffusion" or written
        if key in (K.HARDWARE_MACHINE_RANK, K.HARDWARE_MAIN_PROCESS_IP, K.HARDWARE_MAIN_PROCESS_PORT,
                   K.HARDWARE_RDZV_BACKEND, K.HARDWARE_SAME_NETWORK):
            return v[K.HARDWARE_NUM_MACHINES] > 1 or written
        if key in MERGED:
            return written and (bool(fsdp_version(strategy)) or bool(v[key]))
        if key.startswith("fsdp.") and key != K.FSDP_CPU_RAM_EFFICIENT_LOADING:
            if not fsdp_version(strategy):
                return False
            if key == K.FSDP_SHARDING_STRATEGY:
                return fsdp_version(strategy) == 1
            if key == K.FSDP_MIN_NUM_PARAMS:
                return v[K.FSDP_AUTO_WRAP_POLICY] == "size"
            if key == K.FSDP_TRANSFORMER_LAYER_CLS_TO_WRAP:
                return v[K.FSDP_AUTO_WRAP_POLICY] == "transformer" or bool(v[key])
            return True
        if key == K.FSDP_CPU_RAM_EFFICIENT_LOADING:
            return bool(fsdp_version(strategy))
        if key.startswith("deepspeed."):
            if strategy != "deepspeed":
                return False
            if key == K.DEEPSPEED_NVME_PATH:
                return "nvme" in (v[K.DEEPSPEED_OFFLOAD_PARAM], v[K.DEEPSPEED_OFFLOAD_OPTIMIZER]) or written
            return True
        if key.startswith("context_parallel.sp_"):
            return strategy == "deepspeed" or written  # Ulysses runs under DeepSpeed only
        if key.startswith("context_parallel."):
            # The seed's UI shows context parallelism on CUDA hosts only.
            return (self.platform == "cuda" and fsdp_version(strategy) == 2) or written
        if key == K.TRAINING_OPTIMIZER:
            return strategy != "deepspeed"
        if key in (K.TRAINING_EMA_DECAY, K.TRAINING_EMA_DEVICE):
            return v[K.TRAINING_EMA] or written
        return True

    def visible_keys(self, step_id: str) -> list[str]:
        step = STEPS[STEP_IDS.index(step_id)]
        return [k for k in step.keys + advanced_keys(step_id) if self.visible(k)]

    # -- moving on --------------------------------------------------------------------

    def can_advance(self) -> tuple[bool, str]:
        """Next is refused while the current step has errors (Review shows every one)."""
        step_id = STEP_IDS[self.step]
        if self.step >= len(STEPS) - 1:
            return False, "this is the last step: save with ctrl+s"
        errs = self.step_errors(step_id)
        if errs:
            first = errs[0]
            return False, f"{len(errs)} error(s) on this step: [{first.key}] {first.message}"
        return True, ""

    def advance(self) -> tuple[bool, str]:
        ok, why = self.can_advance()
        if ok:
            self.step += 1
        return ok, why

    def back(self) -> bool:
        if self.step == 0:
            return False
        self.step -= 1
        return True

    def goto(self, step_id: str) -> None:
        self.step = STEP_IDS.index(step_id)

    # -- saving -----------------------------------------------------------------------

    def save(self) -> Path:
        """Write settings.toml; refused while there are errors (save a draft instead)."""
        if self.errors:
            first = self.errors[0]  # named, with its fix, as the row shows it: which key, and what to do
            raise SaveRefused(f"{len(self.errors)} error(s), the first [{first.key}] {first.message}"
                              + (f" — {first.fix.rstrip('.')}" if first.fix else "")
                              + ("; Review (F6): Enter on it removes or renames it" if first.message.startswith("unknown key")
                                 else "; fix them or save a draft (ctrl+r)"))
        self.document.save(self.path)
        self.saved_text = self.document.text()
        self.existed = True
        return self.path

    @property
    def draft_path(self) -> Path:
        return self.path.with_name(self.path.stem + ".draft.toml")

    def save_draft(self) -> Path:
        """Write the edits, errors and all, to `draft_path`: never over the settings file
        that CI compiles. The edits stay unsaved (dirty) until a real save."""
        return SettingsDocument(self.document.text()).save(self.draft_path)

    def save_and_compile(self) -> Path:
        """Save, then write the artefacts exactly as `tuner compile` would."""
        self.save()
        result = compile_text(self.document.text(), path=self.path)
        if not result.ok:
            raise SaveRefused("the saved settings did not compile")
        return result.write()


class SaveRefused(Exception):
    """Saving was refused; the message says why."""
