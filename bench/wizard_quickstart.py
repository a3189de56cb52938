"""Time the wizard's quick starts in a real terminal (tmux), keyboard only, and check that
key bursts land exactly.

    python bench/wizard_quickstart.py [--pace 0.25]      # the two quick starts, at a person's pace
    python bench/wizard_quickstart.py --bursts 20        # 20 runs of each burst, no pause between keys

A Llama-2-7B config.json (shapes only, no weights) is written to a temporary directory;
`tuner wizard settings.toml` runs in an 80x24 tmux pane. The quick starts, as a person
would type them with `--pace` seconds between keys, waiting for the screen after each step:

- proposed: F10, the model directory, Tab 8, Tab 80, Tab 1, Enter (the proposal: ZeRO-1),
  ctrl+s, ctrl+q;
- ZeRO-3 + CPU offload: the same, then Down until "ZeRO-3 + CPU offload" is chosen, Enter.

Each prints the seconds from launch to "saved", the keys pressed, and what `tuner compile
settings.toml` says (exit 0, the strategy, bf16, sharded checkpoints).

`--bursts N` sends each of these as ONE send-keys call (no delay between keys), N times each,
on a fresh wizard, and checks the saved file value by value:
- the whole ZeRO-3 + CPU offload quick start (F10 ... Down x9 Enter ctrl+s);
- a 16-value edit across five steps (Model, Hardware, Checkpoints, Precision, Sharding:
  text fields, dropdowns opened and picked with Enter/Down/Up, then ctrl+s).
It prints "quick start burst: k/N exact" and "16-value burst: k/N exact" and exits 1 unless
every run was exact.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LLAMA2_7B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "torch_dtype": "float16",
    "hidden_act": "silu", "rope_theta": 10000.0,
}


class Pane:
    def __init__(self, socket: str) -> None:
        self.base = ["tmux", "-L", socket]
        self.keys_pressed = 0
        self.target = "qs"
        self.runs = 0

    def __call__(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=30).stdout

    def wait_for(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self("capture-pane", "-p", "-t", self.target):
                return
            time.sleep(0.05)
        raise SystemExit(f"{text!r} did not appear:\n" + self("capture-pane", "-p", "-t", self.target))

    def press(self, pace: float, *keys: str) -> None:
        for key in keys:
            self("send-keys", "-t", self.target, key)
            self.keys_pressed += 1
            time.sleep(pace)

    def type(self, pace: float, text: str) -> None:
        for ch in text:
            self("send-keys", "-t", self.target, "-l", ch)
            self.keys_pressed += 1
            time.sleep(pace)


def _workdir(tmp: str) -> Path:
    work = Path(tmp)
    (work / "llama-2-7b").mkdir()
    (work / "llama-2-7b" / "config.json").write_text(json.dumps(LLAMA2_7B))
    return work


def _launch(pane: Pane, work: Path) -> float:
    tuner = Path(sys.executable).parent / "tuner"
    command = f"env -u COLUMNS -u LINES {tuner} wizard settings.toml; echo WIZARD-EXIT=$?; sleep 30"
    start = time.monotonic()
    pane.runs += 1
    previous, pane.target = pane.target, f"qs{pane.runs}"
    pane("new-session", "-d", "-s", pane.target, "-x", "80", "-y", "24", "-c", str(work), "-e", f"HOME={work}",
         "-e", "TUNER_PLATFORM=cpu", command)
    if pane.runs > 1:
        pane("kill-session", "-t", previous)  # after the new one: the last session would end the server
    pane.wait_for("1. Model")
    return start


def _screen(pane: Pane) -> str:
    return pane("capture-pane", "-p", "-t", pane.target)


def person_quick_start(pace: float, offload: bool) -> int:
    """One quick start at a person's pace; prints its timing and what compiles."""
    tuner = Path(sys.executable).parent / "tuner"
    with tempfile.TemporaryDirectory() as tmp:
        work = _workdir(tmp)
        pane = Pane(f"tuner-qs-{os.getpid()}")
        try:
            start = _launch(pane, work)
            painted = time.monotonic() - start
            pane.press(pace, "F10")
            pane.wait_for("Quick start")
            pane.type(pace, "llama-2-7b")
            pane.press(pace, "Tab")
            pane.type(pace, "8")
            pane.press(pace, "Tab")
            pane.type(pace, "80")
            pane.press(pace, "Tab")
            pane.type(pace, "1")
            pane.wait_for("Proposed:")
            while offload and "Chosen: ZeRO-3 + CPU offload" not in _screen(pane):
                pane.press(pace, "Down")  # a person reads the line, then presses Down again
                pane.wait_for("Chosen:")
            pane.press(pace, "Enter")
            pane.wait_for("6. Review")
            pane.press(pace, "C-s")
            pane.wait_for("saved settings.toml")
            saved = time.monotonic() - start
            pane.press(0, "C-q")
        finally:
            pane("kill-server")
        done = subprocess.run([str(tuner), "compile", "settings.toml", "--out", "build"], cwd=work,
                              capture_output=True, text=True)
        manifest = json.loads((work / "build" / "manifest.json").read_text()) if done.returncode == 0 else {}
        ds = json.loads((work / "build" / "deepspeed.json").read_text()) if (work / "build" / "deepspeed.json").exists() else {}
    settings = manifest.get("settings", {})
    zero = ds.get("zero_optimization", {})
    print(f"[{'ZeRO-3 + CPU offload' if offload else 'proposed'}] first paint: {painted:.2f} s; "
          f"launch -> saved (keyboard only, {pace:.2f} s between keys): {saved:.2f} s, {pane.keys_pressed} keys")
    print(f"  tuner compile exit {done.returncode}; strategy {manifest.get('plan', {}).get('strategy', '?')}; "
          f"zero stage {zero.get('stage', '-')}; offload optimizer/param "
          f"{zero.get('offload_optimizer', {}).get('device', '-')}/{zero.get('offload_param', {}).get('device', '-')}; "
          f"mixed_precision {settings.get('training', {}).get('mixed_precision')}; "
          f"checkpoints {settings.get('checkpoint', {}).get('state_dict_type')}")
    return done.returncode


#: The ZeRO-3 + CPU offload quick start as one burst (Down x9: the last strategy that fits).
QUICK_BURST = ["F10", *"llama-2-7b", "Tab", "8", "Tab", "8", "0", "Tab", "1", *["Down"] * 9, "Enter", "C-s"]
QUICK_EXPECTED = {
    "model.path": "llama-2-7b", "hardware.num_processes": 8, "hardware.gpu_memory_gib": 80,
    "deepspeed.enabled": True, "deepspeed.zero_stage": 3, "deepspeed.offload_optimizer": "cpu",
    "deepspeed.offload_param": "cpu", "training.mixed_precision": "bf16", "checkpoint.state_dict_type": "sharded",
}

#: 16 values across five steps, step key -> [(key, keys that set it)] (Tab counts derived below).
EDIT = [
    ("F1", [("data.seq_len", list("256"), 256), ("output.dir", list("out-burst"), "out-burst")]),
    ("F2", [("hardware.platform", ["Enter", "Down", "Down", "Down", "Down", "Enter"], "cpu"),
            ("hardware.num_processes", ["2"], 2), ("hardware.gpu_memory_gib", list("40"), 40),
            ("hardware.host_memory_gib", list("64"), 64)]),
    ("F4", [("checkpoint.state_dict_type", ["Enter", "Down", "Enter"], "full"),
            ("checkpoint.every_steps", list("25"), 25), ("checkpoint.keep_last", ["2"], 2)]),
    ("F5", [("training.mixed_precision", ["Enter", "Down", "Down", "Enter"], "bf16"),
            ("training.micro_batch_size", ["4"], 4), ("training.gradient_accumulation_steps", ["2"], 2),
            ("training.learning_rate", list("0.0003"), 0.0003), ("training.max_steps", list("100"), 100),
            ("training.warmup_steps", list("10"), 10)]),
    ("F3", [("strategy", ["Enter", "Up", "Enter"], "ddp")]),
]


def edit_burst() -> tuple[list[str], dict]:
    """The keys of the 16-value edit, the Tabs counted from each step's visible fields."""
    from tuner.tui.layout import STEP_IDS, STEPS
    from tuner.tui.model import WizardState

    state = WizardState(Path("settings.toml"))
    keys: list[str] = []
    expected = {}
    for fkey, fields in EDIT:
        step = STEPS[int(fkey[1:]) - 1]
        order = (["strategy"] if step.id == "sharding" else []) + [k for k in step.keys if state.visible(k)]
        at = 0
        keys.append(fkey)
        for key, typed, value in fields:
            keys += ["Tab"] * (order.index(key) - at)
            at = order.index(key)
            keys += typed
            expected[key] = value
    assert len(expected) == 16 and STEP_IDS
    return keys + ["C-s"], expected


def _values(path: Path) -> dict:
    """The saved file's settings as the compiler reads them (canonical keys) and its strategy."""
    from tuner.tui.model import WizardState

    if not path.exists():
        return {"<no file>": str(path)}
    state = WizardState(path, path.read_text())
    if state.errors:
        return {"<errors>": [d.format() for d in state.errors]}
    return {**state.values, "strategy": state.strategy}


def burst_run(pane: Pane, work: Path, keys: list[str], expected: dict) -> tuple[bool, str, float]:
    settings = work / "settings.toml"
    settings.unlink(missing_ok=True)
    _launch(pane, work)
    start = time.monotonic()
    pane("send-keys", "-t", pane.target, *keys)  # ONE call: no pause between keys
    pane.wait_for("saved settings.toml", timeout=180)
    took = time.monotonic() - start
    pane("send-keys", "-t", pane.target, "C-q")
    pane.wait_for("WIZARD-EXIT=0")
    got = _values(settings)
    wrong = {k: (got.get(k, "<missing>"), v) for k, v in expected.items() if got.get(k, "<missing>") != v}
    return not wrong, "" if not wrong else f"got/expected {wrong}", took


def bursts(n: int) -> int:
    keys, expected = edit_burst()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        work = _workdir(tmp)
        pane = Pane(f"tuner-burst-{os.getpid()}")
        try:
            for name, burst, want in (("quick start burst", QUICK_BURST, QUICK_EXPECTED),
                                      ("16-value burst", keys, {**expected})):
                exact, times = 0, []
                for run in range(n):
                    ok, why, took = burst_run(pane, work, burst, want)
                    exact += ok
                    times.append(took)
                    print(f"  {name} run {run + 1}: {'exact' if ok else why} ({took:.1f} s)", flush=True)
                failures += n - exact
                print(f"{name}: {exact}/{n} exact ({len(burst)} keys in one send-keys call; "
                      f"burst -> saved {min(times):.1f}-{max(times):.1f} s)")
        finally:
            pane("kill-server")
    return 1 if failures else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pace", type=float, default=0.25, help="seconds between keys (a person's typing speed)")
    ap.add_argument("--bursts", type=int, default=0, help="instead: N runs of each burst, checked value by value")
    args = ap.parse_args()
    if not shutil.which("tmux"):
        print("tmux is not installed (apt-get install tmux)", file=sys.stderr)
        return 2
    if args.bursts:
        return bursts(args.bursts)
    return max(person_quick_start(args.pace, offload=False), person_quick_start(args.pace, offload=True))


if __name__ == "__main__":
    raise SystemExit(main())
