"""Fixtures for the wizard's tests: no nondeterminism (no cursor blink, fixed hardware
facts, a fixed target platform, a private HOME and config directory)."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from tuner.compiler.read.hardware import GIB, GpuInfo, HardwareFacts
from tuner.tui.app import WizardApp

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
from tuner.tui.fields import dom_id
from tuner.tui.keyqueue import KeyQueue
from tuner.tui.model import WizardState
from tuner.tui.services import Services, ServiceUnavailable, Templates

#: What a fake `tuner doctor` reports: two 80 GiB GPUs on CUDA (its own HardwareFacts, as a dict).
FAKE_FACTS = HardwareFacts(
    platform="cuda",
    gpus=[GpuInfo(index=i, name="NVIDIA H100 80GB HBM3", memory_bytes=int(79.6 * GIB), compute_capability="9.0",
                  bf16=True) for i in range(2)],
    host_memory_bytes=int(503.7 * GIB),
    cpu_cores=32,
).to_dict()

FAKE_ESTIMATE = "per GPU: 3.1 GiB of 79.6 GiB (fake estimate for the snapshots)"

FAKE_BLOCKS = {
    "classes": [
        {"name": "LlamaDecoderLayer", "parameters": 1_200_000, "occurrences": 2,
         "sample_paths": ["model.layers.0"]},
        {"name": "LlamaAttention", "parameters": 500_000, "occurrences": 2, "sample_paths": ["model.layers.0.self_attn"]},
        {"name": "Embedding", "parameters": 262_144, "occurrences": 1, "sample_paths": ["model.embed_tokens"]},
    ],
    "no_split_modules": ["LlamaDecoderLayer"],
    "suggested": ["LlamaDecoderLayer"],
    "model_class": "LlamaForCausalLM",
    "library": "transformers",
    "total_parameters": 1_962_144,
    "cached": False,
}


#: The most an in-process pilot test may take (each takes seconds). A pilot that waits for an
#: app that has ended waits for ever (Textual 8.2: `Pilot.press` awaits the animator, and an
#: animation started while a crashed app is torn down never completes); past this the test
#: fails with the awaited stack instead of holding its worker and the suite.
PILOT_LIMIT_S = 300


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Run `async def` tests (Textual's Pilot is async) without an async pytest plugin."""
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(asyncio.wait_for(pyfuncitem.obj(**args), PILOT_LIMIT_S))
        return True
    return None


async def settled(app) -> None:
    """Wait until the wizard has handled every key it received and every message those keys
    (or a test's own change, such as setting a Select's value) caused, from the focused
    widget up to the App: the wizard's own `KeyQueue` drain and settle."""
    keys = getattr(app, "keys", None)
    if isinstance(keys, KeyQueue) and app.is_running:
        await keys.drained()
        await keys.settle()


@pytest.fixture(autouse=True)
def _pilot_waits_until_settled(monkeypatch):
    """`Pilot.pause()` and `Pilot.press()` return once the wizard has settled (above).

    Textual's own wait is `wait_for_idle`: it returns when the process used little CPU over
    20 ms, which on a loaded machine (CI's two cores beside rank processes) is also true of a
    process that was simply not scheduled, with messages still queued. A test then read the
    screen one message early (CI: `test_a_field_hidden_at_start_is_built_when_it_shows` saw
    the LoRA row still hidden after choosing LoRA)."""
    pause, press = Pilot.pause, Pilot.press

    async def settled_pause(self, delay: float | None = None) -> None:
        await pause(self, delay)
        if delay is None:
            await settled(self.app)

    async def settled_press(self, *keys: str) -> None:
        await press(self, *keys)
        await settled(self.app)

    monkeypatch.setattr(Pilot, "pause", settled_pause)
    monkeypatch.setattr(Pilot, "press", settled_press)


@pytest.fixture(autouse=True)
def _wizard_env(tmp_path, monkeypatch):
    """A private HOME and working directory; the compiler's platform probe fixed to CPU."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TUNER_PLATFORM", "cpu")
    monkeypatch.delenv("NO_COLOR", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


class Calls:
    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []


def fake_services(tmp_path: Path, blocks: Any = FAKE_BLOCKS, calls: Calls | None = None) -> Services:
    calls = calls or Calls()

    def detect(model, family, flavour, refresh):
        calls.log.append(("detect", (model, family, flavour, refresh)))
        if isinstance(blocks, Exception):
            raise blocks
        return {**blocks, "cached": not refresh}

    def clear_detection():
        calls.log.append(("clear_detection", None))
        return 3

    def clear_offload(path):
        calls.log.append(("clear_offload", path))
        return 1

    return Services(hardware=lambda: FAKE_FACTS, blocks=detect, clear_detection_cache=clear_detection,
                    clear_offload_cache=clear_offload, estimate=lambda text, path: FAKE_ESTIMATE,
                    templates=Templates(tmp_path / "home" / "templates"))


def unavailable_services(tmp_path: Path) -> Services:
    def missing(*_a, **_k):
        raise ServiceUnavailable("Block detection is not available in this tuner (tuner.runtime.blocks is missing)")
    return Services(hardware=None, blocks=missing, estimate=lambda text, path: None,
                    templates=Templates(tmp_path / "home" / "templates"))


def make_app(path: Path, text: str | None = None, services: Services | None = None, facts: Any = FAKE_FACTS,
             tmp_path: Path | None = None) -> WizardApp:
    """The wizard on `path` with fixed hardware facts (no detection thread) and no blink."""
    if text is not None:
        path.write_text(text, encoding="utf-8")
    state = WizardState.open(path)
    state.hardware = facts
    return WizardApp(state, services or fake_services(tmp_path or path.parent), detect_hardware=False,
                     cursor_blink=False)


def widget(app: WizardApp, key: str):
    return app.screen.query_one(f"#in-{dom_id(key)}")


async def type_into(pilot, key: str, text: str) -> None:
    """Focus the field for `key`, clear it, type `text` key by key (as a person would)."""
    field = widget(pilot.app, key)
    field.focus()
    await pilot.pause()
    field.value = ""
    await pilot.press(*list(text))
    await pilot.pause()


async def choose(pilot, key: str, value: Any) -> None:
    """Pick `value` in the Select for `key` (sends Select.Changed as a keyboard choice does)."""
    select = widget(pilot.app, key) if "." in key else pilot.app.screen.query_one(f"#{key}")
    select.focus()
    select.value = value
    await pilot.pause()
