"""Time the wizard's quick start in a real terminal (tmux), as the issue's target reads:
"7B Llama-style model, 8×80 GB, sharded checkpoints, bf16" saved to a file that compiles.

    python bench/wizard_quickstart.py [--pace 0.25]

A Llama-2-7B config.json (shapes only, no weights) is written to a temporary directory;
`tuner wizard settings.toml` runs in an 80×24 tmux pane; the script presses the keys a
person would (F10, the model directory, Tab 8, Tab 80, Tab 1, Enter, ctrl+s, ctrl+q),
waiting for the screen after each step, with `--pace` seconds between keys (a person's
typing speed). It prints the seconds from launch to "saved", the keys pressed, and
checks that `tuner compile settings.toml` exits 0 with ZeRO-1, bf16, sharded checkpoints.
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

    def __call__(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=30).stdout

    def wait_for(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self("capture-pane", "-p", "-t", "qs"):
                return
            time.sleep(0.05)
        raise SystemExit(f"{text!r} did not appear:\n" + self("capture-pane", "-p", "-t", "qs"))

    def press(self, pace: float, *keys: str) -> None:
        for key in keys:
            self("send-keys", "-t", "qs", key)
            self.keys_pressed += 1
            time.sleep(pace)

    def type(self, pace: float, text: str) -> None:
        for ch in text:
            self("send-keys", "-t", "qs", "-l", ch)
            self.keys_pressed += 1
            time.sleep(pace)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pace", type=float, default=0.25, help="seconds between keys (a person's typing speed)")
    args = ap.parse_args()
    if not shutil.which("tmux"):
        print("tmux is not installed (apt-get install tmux)", file=sys.stderr)
        return 2
    tuner = Path(sys.executable).parent / "tuner"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "llama-2-7b").mkdir()
        (work / "llama-2-7b" / "config.json").write_text(json.dumps(LLAMA2_7B))
        pane = Pane(f"tuner-qs-{os.getpid()}")
        command = f"env -u COLUMNS -u LINES {tuner} wizard settings.toml; sleep 30"
        start = time.monotonic()
        pane("new-session", "-d", "-s", "qs", "-x", "80", "-y", "24", "-c", str(work), "-e", f"HOME={work}", command)
        try:
            pane.wait_for("1. Model")
            painted = time.monotonic() - start
            pane.press(args.pace, "F10")
            pane.wait_for("Quick start")
            pane.type(args.pace, "llama-2-7b")
            pane.press(args.pace, "Tab")
            pane.type(args.pace, "8")
            pane.press(args.pace, "Tab")
            pane.type(args.pace, "80")
            pane.press(args.pace, "Tab")
            pane.type(args.pace, "1")
            pane.wait_for("Proposed:")
            pane.press(args.pace, "Enter")
            pane.wait_for("6. Review")
            pane.press(args.pace, "C-s")
            pane.wait_for("saved settings.toml")
            saved = time.monotonic() - start
            pane.press(0, "C-q")
        finally:
            pane("kill-server")
        done = subprocess.run([str(tuner), "compile", "settings.toml", "--out", "build"], cwd=work,
                              capture_output=True, text=True)
        manifest = json.loads((work / "build" / "manifest.json").read_text()) if done.returncode == 0 else {}
    settings = manifest.get("settings", {})
    print(f"first paint: {painted:.2f} s")
    print(f"launch -> saved (scripted, {args.pace:.2f} s between keys): {saved:.2f} s, {pane.keys_pressed} keys")
    print(f"tuner compile exit {done.returncode}; strategy {manifest.get('plan', {}).get('strategy', '?')}; "
          f"mixed_precision {settings.get('training', {}).get('mixed_precision')}; "
          f"checkpoints {settings.get('checkpoint', {}).get('state_dict_type')}")
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
