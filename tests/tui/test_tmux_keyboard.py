"""Issue 25 in a real terminal: tmux runs `tuner`, keyboard only (send-keys), the screen is
read with capture-pane and the saved file is read back. One test (or more) per item:

1. every dropdown (each enum key's Select, derived from the declaration) set from the keyboard;
2. clearing a number and typing its default saves the number;
3. bursts (one send-keys call, no pause): the 7B ZeRO-3 + CPU offload quick start and a
   16-value edit across five steps land exactly (3 runs each here; bench/wizard_quickstart.py
   --bursts 20 runs them 20 times); a pasted path then Enter uses the path;
4. ctrl+c with unsaved edits writes the draft and exits 130; SIGTERM / SIGHUP restore the
   terminal (tmux: not in the alternate screen, mouse reporting off); after "too small" a
   field has focus; the F7 builder opens with a field focused;
5. the quick start lists the fitting strategies with their per-GPU figures; Down picks one;
6. a huge integer is "too large", an emoji shows as itself, a multi-line paste says that only
   its first line was kept;
7. a value the compiler rejects (`seed = -1`, `mixed_precision = "fp7"`) shows as the file holds
   it, ctrl+s refuses naming the error, and the file is left byte for byte as it was
   (tests/tui/test_rejected_values.py has one Pilot case per widget kind).
"""

from __future__ import annotations

import json
import os
import re
import runpy
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from tuner.compiler.compile import compile_file
from tuner.compiler.keys.schema import index
from tuner.tui.layout import STEP_IDS, STEPS, STRATEGY_KEYS, advanced_keys, key_info
from tuner.tui.model import WizardState

from .tmux import Tmux, ensure_tmux, settle_size, start, tuner_command

pytestmark = pytest.mark.tui

BENCH = Path(__file__).resolve().parents[2] / "bench"

#: The issue's 19 dropdowns (its list, by key). The walk covers every enum key the
#: declaration has, these included.
ISSUE_DROPDOWNS = {
    "model.family", "model.type", "model.pooling", "hardware.platform", "hardware.rdzv_backend",
    "deepspeed.zero_stage", "deepspeed.offload_optimizer", "deepspeed.offload_param", "deepspeed.scheduler",
    "fsdp.sharding_strategy", "fsdp.backward_prefetch", "context_parallel.comm_strategy",
    "checkpoint.state_dict_type", "training.mixed_precision", "training.optimizer", "training.lr_scheduler",
    "training.ema_device", "cluster.type", "accelerate.dynamo_backend",
}


def dropdown_keys() -> list[str]:
    """Every key the wizard shows as a Select: an enum in the declaration (the strategy keys
    are the Sharding step's strategy choice instead)."""
    return [k for k, info in index().keys.items() if info.enum and k not in STRATEGY_KEYS]


@pytest.fixture
def tmux(request):
    pane = Tmux(ensure_tmux(), f"tuner-kb-{os.getpid()}-{request.node.name[:20]}")
    yield pane
    pane.kill()


def _launch(tmux: Tmux, cwd: Path, args: str = "") -> None:
    start(tmux, cwd, tuner_command(cwd, args))
    tmux.wait_for("1. Model")


def _saved(tmux: Tmux, work: Path) -> None:
    """ctrl+s, and settings.toml changes (the wizard goes on: the next sequence starts from
    here; a "saved" message an earlier save left on the screen would prove nothing)."""
    path = work / "settings.toml"
    before = path.read_bytes() if path.exists() else None
    tmux.keys("C-s")
    tmux.wait_for("saved settings.toml")
    deadline = time.monotonic() + 30
    while (path.read_bytes() if path.exists() else None) == before:
        assert time.monotonic() < deadline, f"ctrl+s did not change settings.toml:\n{tmux.screen()}"
        time.sleep(0.05)


def _quit_saved(tmux: Tmux) -> None:
    tmux.keys("C-s")
    tmux.wait_for("saved settings.toml")
    tmux.keys("C-q")
    tmux.wait_for("WIZARD-EXIT=0")


def _step(tmux: Tmux, fkey: str) -> None:
    """Go to a step and wait until the screen (the status line too) shows it."""
    n = int(fkey[1:])
    tmux.keys(fkey)
    tmux.wait_for(f"▶ F{n} ")
    step_keys = set(STEPS[n - 1].keys) | set(advanced_keys(STEP_IDS[n - 1])) | {"strategy"}
    deadline = time.monotonic() + 30
    while tmux.where() not in step_keys and time.monotonic() < deadline:
        time.sleep(0.1)


def _pick(tmux: Tmux, key: str, current, target) -> None:
    """Open `key`'s list, move from `current` to `target` with Up/Down, pick it with Enter."""
    options = key_info(key).enum
    steps = options.index(target) - options.index(current)
    tmux.burst("Enter", *(["Down"] * steps if steps > 0 else ["Up"] * -steps), "Enter")


# -- 1 --------------------------------------------------------------------------------------

#: The walk, in one app session: (step key, [(key, target value)]) in the order the fields
#: come with Tab, and in an order that makes each field show (an embedding family shows
#: pooling, two machines the rendezvous backend, EMA its device, FSDP v1 the sharding strategy,
#: FSDP2 on CUDA context parallelism, DeepSpeed its keys and Ulysses' backend). "strategy"
#: switches the Sharding step's strategy (F3 first: it focuses the strategy choice again).
WALK = [
    ("F1", [("model.family", "embedding"), ("model.type", "lora"), ("model.pooling", "cls"), ("data.format", "chat")]),
    ("F2", [("hardware.platform", "cuda"), ("hardware.num_machines", "2"), ("hardware.rdzv_backend", "c10d"),
            ("accelerate.dynamo_backend", "eager"), ("cluster.type", "slurm")]),
    ("F5", [("training.mixed_precision", "bf16"), ("training.optimizer", "sgd"), ("training.lr_scheduler", "cosine"),
            ("training.clip_method", "value"), ("training.ema", True), ("training.ema_device", "accelerator"),
            ("training.timestep_sampling", "logit_normal")]),
    ("F4", [("checkpoint.state_dict_type", "full")]),
    ("F3", [("strategy", "fsdp1"), ("fsdp.sharding_strategy", "shard_grad_op"), ("fsdp.backward_prefetch", "BACKWARD_POST"),
            ("strategy", "fsdp2"), ("context_parallel.comm_strategy", "alltoall"),
            ("strategy", "deepspeed"), ("deepspeed.zero_stage", 3), ("deepspeed.offload_optimizer", "cpu"),
            ("deepspeed.offload_param", "cpu"), ("context_parallel.sp_backend", "deepspeed"),
            ("deepspeed.scheduler", "WarmupCosineLR")]),
]
STRATEGY_ORDER = ["ddp", "fsdp2", "fsdp1", "deepspeed"]
NOT_DROPDOWNS = {"strategy", "hardware.num_machines", "training.ema"}  # the walk's other keys: what makes fields show


def test_the_walk_covers_every_dropdown():
    """Every choice field the declaration gives the wizard is in the walk below, and only those:
    a new dropdown fails here until the walk sets it from the keyboard too."""
    walked = {k for _, fields in WALK for k, _ in fields} - NOT_DROPDOWNS
    keys = set(dropdown_keys())
    assert ISSUE_DROPDOWNS <= keys, f"not Select fields any more: {sorted(ISSUE_DROPDOWNS - keys)}"
    assert walked == keys, f"dropdowns not walked: {sorted(keys - walked)}; walked but not dropdowns: {sorted(walked - keys)}"
    for _, fields in WALK:
        for key, target in fields:
            assert key in NOT_DROPDOWNS or target in key_info(key).enum, f"{key}: {target!r} is not one of its choices"


def test_every_dropdown_is_set_from_the_keyboard(tmux, _wizard_env):
    """One session, keyboard only: every dropdown opened with Enter, moved with Up/Down, picked
    with Enter; the draft holds every pick (a dropdown with one choice keeps it: nothing to write)."""
    test_the_walk_covers_every_dropdown()
    _launch(tmux, _wizard_env)
    strategy = "fsdp2"
    values = {k: info.default for k, info in index().keys.items()}
    expected = {}
    for fkey, fields in WALK:
        _step(tmux, fkey)
        for key, target in fields:
            if key == "strategy":
                tmux.keys(fkey)  # the step's first field: the strategy choice
                tmux.wait_until_focus("strategy")
            tmux.focus(key)
            if key == "strategy":
                steps = STRATEGY_ORDER.index(target) - STRATEGY_ORDER.index(strategy)
                tmux.burst("Enter", *(["Down"] * steps if steps > 0 else ["Up"] * -steps), "Enter")
                strategy = target
            elif key == "training.ema":
                tmux.burst("space")
            elif key == "hardware.num_machines":
                tmux.burst("C-u", target)
            else:
                _pick(tmux, key, values[key], target)
                expected[key] = target if len(key_info(key).enum) > 1 else "<not written>"
    tmux.keys("C-r")  # the draft: every value as picked, whatever the compiler says of the mix
    tmux.wait_for("saved draft")
    draft = tomllib.loads((_wizard_env / "settings.draft.toml").read_text())
    got = {k: draft.get(index().keys[k].section, {}).get(index().keys[k].name, "<not written>") for k in expected}
    assert got == expected
    assert set(expected) == set(dropdown_keys())
    _signal_restores_the_terminal(tmux, _wizard_env, "TERM", 143)  # item 4, in the same wizard


# -- 2 --------------------------------------------------------------------------------------

def _clearing_a_number_and_typing_its_default_saves_the_number(tmux: Tmux, work: Path) -> None:
    _step(tmux, "F2")
    tmux.focus("hardware.num_machines")
    tmux.keys("C-u")
    tmux.wait_for('must be an integer (got "")')
    tmux.keys("1")
    _step(tmux, "F5")
    tmux.focus("training.micro_batch_size")
    tmux.keys("C-u", "1")
    _saved(tmux, work)
    text = (work / "settings.toml").read_text()
    assert "num_machines = 1" in text and "micro_batch_size = 1" in text, text
    assert compile_file(work / "settings.toml").ok


# -- 3 --------------------------------------------------------------------------------------

def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH / "wizard_quickstart.py"), *args], capture_output=True,
                          text=True, timeout=900)


def test_quick_start_and_a_16_value_edit_sent_as_bursts_land_exactly():
    """3 runs of each here (bench/wizard_quickstart.py --bursts 20 runs 20 of each)."""
    done = _bench("--bursts", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "quick start burst: 3/3 exact" in done.stdout and "16-value burst: 3/3 exact" in done.stdout, done.stdout


def _tabs_to(step_id: str, key: str) -> list[str]:
    """Tabs from a step's first field to `key` on a new file (the strategy choice is Sharding's first)."""
    state = WizardState(Path("settings.toml"))
    step = STEPS[STEP_IDS.index(step_id)]
    order = (["strategy"] if step_id == "sharding" else []) + [k for k in step.keys if state.visible(k)]
    return ["Tab"] * order.index(key)


def _the_issues_bursts_act_where_the_keys_before_them_left_focus(tmux: Tmux, work: Path) -> None:
    """F3, Tabs and class names in one burst fill the classes field (they landed on the
    "Detect blocks" button); a ctrl+u on a dropdown followed by Tabs empties no other field.
    F3 and F5 each focus their step's first field: the Tabs are counted from there on a file
    whose edits so far change no field's visibility."""
    tmux.burst("F3", *_tabs_to("sharding", "fsdp.transformer_layer_cls_to_wrap"), *"LlamaDecoderLayer",
               "F5", "C-u", *_tabs_to("precision", "training.warmup_steps"))
    _saved(tmux, work)
    settings = tomllib.loads((work / "settings.toml").read_text())
    assert settings["fsdp"]["transformer_layer_cls_to_wrap"] == ["LlamaDecoderLayer"]
    assert "warmup_steps" not in settings.get("training", {})


def test_one_wizard_many_sequences(tmux, _wizard_env):
    """One wizard on a new file, several key sequences one after the other, each from a screen
    it waits for and each checked on the saved file: items 2, 3 (bursts), 6, 4 (too small,
    F7 builder), then item 4's SIGHUP restoring the terminal."""
    _launch(tmux, _wizard_env)
    # first: its message shows below the Hardware step's detected facts only while they are short
    _clearing_a_number_and_typing_its_default_saves_the_number(tmux, _wizard_env)
    _the_issues_bursts_act_where_the_keys_before_them_left_focus(tmux, _wizard_env)
    _messages_huge_integer_emoji_and_multi_line_paste(tmux, _wizard_env)
    _after_too_small_a_field_has_focus(tmux, _wizard_env)
    _the_f7_builder_opens_with_a_field_focused(tmux, _wizard_env)
    _signal_restores_the_terminal(tmux, _wizard_env, "HUP", 129)


def test_a_pasted_path_then_enter_uses_the_path(tmux, _wizard_env):
    model = _wizard_env / "llama-2-7b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(runpy.run_path(str(BENCH / "wizard_quickstart.py"))["LLAMA2_7B"]))
    _launch(tmux, _wizard_env)
    tmux.burst("F10")
    tmux.text("llama-2-7b")
    tmux.burst("Enter")  # what a terminal sends for a pasted line ending in a newline
    tmux.wait_for("6. Review")
    _quit_saved(tmux)
    assert tomllib.loads((_wizard_env / "settings.toml").read_text())["model"]["path"] == "llama-2-7b"


# -- 4 --------------------------------------------------------------------------------------

def _ctrl_c_with_unsaved_edits_writes_the_draft_and_exits_130(tmux: Tmux, work: Path) -> None:
    saved = (work / "settings.toml").read_bytes() if (work / "settings.toml").exists() else None
    _step(tmux, "F5")
    tmux.focus("training.max_steps")
    tmux.keys("7", "7")
    tmux.wait_for("Max steps               77")
    tmux.keys("C-c")
    screen = tmux.wait_for("WIZARD-EXIT=")
    assert "WIZARD-EXIT=130" in screen and "settings.draft.toml" in screen, screen
    assert "max_steps = 77" in (work / "settings.draft.toml").read_text()
    now = (work / "settings.toml").read_bytes() if (work / "settings.toml").exists() else None
    assert now == saved, "ctrl+c wrote the settings file, not only the draft"
    assert tmux.display("#{alternate_on}") == "0"


def _wizard_pid(tmux: Tmux) -> int:
    shell = tmux.display("#{pane_pid}")
    for _ in range(50):
        out = subprocess.run(["pgrep", "-P", shell], capture_output=True, text=True).stdout.split()
        if out:
            return int(out[0])
        time.sleep(0.1)
    raise AssertionError("the wizard's process was not found")


def _signal_restores_the_terminal(tmux: Tmux, work: Path, signame: str, status: int) -> None:
    """SIGTERM / SIGHUP after an edit: the signal's exit status, the terminal restored (not in
    the alternate screen, mouse reporting off), the edit in the draft."""
    assert tmux.display("#{alternate_on}") == "1"  # the wizard runs in the alternate screen
    _step(tmux, "F5")
    tmux.focus("training.max_steps")
    tmux.keys("5")
    tmux.wait_for("Max steps               5")
    os.kill(_wizard_pid(tmux), getattr(signal, f"SIG{signame}"))
    screen = tmux.wait_for("WIZARD-EXIT=")
    assert f"WIZARD-EXIT={status}" in screen, screen
    assert tmux.display("#{alternate_on}") == "0", "still in the alternate screen"
    assert tmux.display("#{mouse_any_flag}#{mouse_button_flag}#{mouse_sgr_flag}") == "000", "mouse reporting on"
    assert "max_steps = 5" in (work / "settings.draft.toml").read_text()


def _after_too_small_a_field_has_focus(tmux: Tmux, work: Path) -> None:
    _step(tmux, "F5")
    tmux.focus("training.max_steps")
    settle_size(tmux, 30, 8)
    # the too-small message ("Terminal 30x8 is too small: enlarge it to at least 60x16"), read by its
    # left half: an earlier sequence's "Saved" notice may still cover the right half of 30 columns
    tmux.wait_for("enlarge it to")
    settle_size(tmux, 80, 24)
    tmux.wait_for("5. Precision")
    tmux.keys("4", "4")
    _saved(tmux, work)
    assert "max_steps = 44" in (work / "settings.toml").read_text()


def _the_f7_builder_opens_with_a_field_focused(tmux: Tmux, work: Path) -> None:
    tmux.keys("F7")
    tmux.wait_for("DeepSpeed builder")
    tmux.burst("Enter", "Down", "Enter", "C-o")  # ZeRO stage 2 -> 3, apply
    tmux.wait_for("zero3 ·")
    _saved(tmux, work)
    settings = tomllib.loads((work / "settings.toml").read_text())
    assert settings["deepspeed"]["zero_stage"] == 3


# -- 5: the arrows pick a strategy in the quick start (the burst test picks ZeRO-3 + offload) --

def test_quick_start_lists_the_fitting_strategies_and_down_picks_one(tmux, _wizard_env):
    """Then, in the same wizard, item 4: ctrl+c with unsaved edits."""
    _launch(tmux, _wizard_env)
    tmux.keys("F10")
    tmux.wait_for("Quick start")
    screen = tmux.wait_for("(proposed)")
    assert "GiB per GPU" in screen and "Proposed:" in screen
    tmux.keys("Down")
    chosen = tmux.wait_for("Chosen:")
    line = next(line for line in chosen.splitlines() if "Chosen:" in line)
    tmux.keys("Enter")
    tmux.wait_for("6. Review")
    _saved(tmux, _wizard_env)
    label = line.split("Chosen:", 1)[1].split("—")[0].strip()
    assert label and label not in next(line for line in screen.splitlines() if "Proposed:" in line)
    _ctrl_c_with_unsaved_edits_writes_the_draft_and_exits_130(tmux, _wizard_env)


# -- 6 --------------------------------------------------------------------------------------

def _messages_huge_integer_emoji_and_multi_line_paste(tmux: Tmux, work: Path) -> None:
    _step(tmux, "F5")
    tmux.focus("training.max_steps")
    tmux.text("99999999999999999999999")
    screen = tmux.wait_for("too large")
    assert "must be an integer" not in screen
    tmux.keys("C-u")
    tmux.text("😀")
    tmux.wait_for('must be an integer (got "😀")')
    tmux.keys("C-u", "9")
    _step(tmux, "F1")
    tmux.focus("output.dir")
    tmux("set-buffer", "-b", "multi", "first-line\nsecond-line\n")
    tmux("paste-buffer", "-p", "-b", "multi", "-t", tmux.target)  # bracketed, as a terminal pastes
    tmux.wait_for("only the first was kept")
    _saved(tmux, work)
    settings = tomllib.loads((work / "settings.toml").read_text())
    assert settings["output"]["dir"] == "first-line" and settings["training"]["max_steps"] == 9


# -- 7 --------------------------------------------------------------------------------------

def test_a_rejected_value_shows_as_written_and_is_never_written_back(tmux, _wizard_env):
    path = _wizard_env / "settings.toml"
    text = '[model]\npath = "builtin:tiny-llama"\n[training]\nseed = -1\nmixed_precision = "fp7"\n'
    path.write_text(text)
    _launch(tmux, _wizard_env)
    tmux.keys("F5")
    tmux.wait_for('(invalid: "fp7")')  # the dropdown cannot show "fp7": blank, naming it
    tmux.focus("training.seed")  # Tab, opening the Advanced part on the way
    screen = tmux.wait_for("-1 is out of range (minimum 0)")
    assert re.search(r"Training seed\s+-1\b", screen), screen
    tmux.keys("C-s")
    tmux.wait_for("Not saved: 2 error(s)")
    tmux.keys("C-q")  # nothing was edited: it quits at once
    tmux.wait_for("WIZARD-EXIT=0")
    assert path.read_bytes() == text.encode()
