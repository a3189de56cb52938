"""GPU acceptance: one command that proves tuner's GPU path (issue #15).

    python bench/gpu_acceptance.py [--json-out FILE] [--strategies ddp,fsdp2,...] [--budget-s 520]
    python bench/gpu_acceptance.py --smoke [--json-out FILE]      # CPU, tiny model, same code path

On one GPU, for DDP (one process), FSDP2, FSDP v1, FSDP2 + CPU offload, ZeRO-2 + CPU
optimizer offload and ZeRO-3, with a ~1.1B Llama-style model built from a local config
(random weights saved once, bf16 mixed precision, sequence length 2048), each strategy is:

1. compiled with `tuner compile` (a refusal is recorded with the compiler's reason);
2. estimated with `tuner estimate --json` (its per-GPU bytes for these settings);
3. trained with `tuner run`: steps/s and tokens/s over the steps after the warm-up, MFU,
   and rank 0's peak `torch.cuda.max_memory_allocated` (from the trainer's trace);
4. checked, for the strategies in --export-check: the exported model loads with
   `from_pretrained` and reproduces the logits the trained (still sharded) model gave;
5. trained again by the minimal hand-written accelerate loop (bench/plain_loop.py) on the
   same build directory, started through `tuner launch BUILD SCRIPT` (ratio tuner run /
   plain loop in tokens/s, target >= 0.95); with time left at the end, the first of them is
   started again with the launcher `tuner run` itself uses, as a control.

MFU = 6 x parameters x tokens/s / the device's peak dense bf16 FLOP/s (PEAK_BF16_TFLOPS,
NVIDIA's datasheet figures without sparsity; --peak-tflops overrides). Everything runs in
subprocesses, so this driver never imports torch or holds GPU memory. A time budget keeps
the whole command inside one device call; what does not fit is recorded as skipped. The
table is printed and written as JSON after every step (--json-out), so a killed run still
leaves its partial results. Exit status: 0 when every required check passed, else 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLAIN = HERE / "plain_loop.py"
STEPS = HERE / "acceptance_steps.py"
GIB = 1024**3
RATIO_TARGET = 0.95

#: Dense bf16 tensor-core peaks (TFLOP/s, NVIDIA datasheets, no sparsity), matched in order
#: as whole words of the device name (so "A10" is not "A10G" and "L4" not "L40S").
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("GH200", 989.0),
                    ("H200", 989.0), ("H800", 989.0), ("A100", 312.0), ("A800", 312.0), ("L40S", 362.0),
                    ("L40", 181.0), ("L4", 121.0), ("A10", 125.0), ("B200", 2250.0))

#: The ~1.1B Llama-style decoder (TinyLlama-1.1B's shapes), random weights.
GPU_MODEL = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
             "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
             "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048,
             "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
             "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}

STRATEGIES = {  # name -> (label, settings block), in the order they run: the slow offloaded ones last
    "ddp": ("DDP (1 process)", ""),
    "fsdp2": ("FSDP2", '[fsdp]\nenabled = true\nversion = 2\ntransformer_layer_cls_to_wrap = ["LlamaDecoderLayer"]\n'),
    "fsdp1": ("FSDP v1", '[fsdp]\nenabled = true\nversion = 1\ntransformer_layer_cls_to_wrap = ["LlamaDecoderLayer"]\n'),
    "zero3": ("ZeRO-3", "[deepspeed]\nenabled = true\nzero_stage = 3\n"),
    "fsdp2+offload": ("FSDP2 + CPU offload", '[fsdp]\nenabled = true\nversion = 2\noffload_params = true\n'
                                             'transformer_layer_cls_to_wrap = ["LlamaDecoderLayer"]\n'),
    "zero2+offload": ("ZeRO-2 + CPU optimizer", '[deepspeed]\nenabled = true\nzero_stage = 2\noffload_optimizer = "cpu"\n'),
}
OFFLOADED = ("fsdp2+offload", "zero2+offload")  # slow steps (the optimizer on the CPU): fewer of them

SETTINGS = """[model]
family = "causal_lm"
path = "{model_dir}"
[data]
path = "{data}"
seq_len = {seq}
validation_split = 0.0
[hardware]
platform = "{platform}"
num_processes = 1
[training]
mixed_precision = "{precision}"
micro_batch_size = {micro}
max_steps = {steps}
learning_rate = {lr}
warmup_steps = 1
max_grad_norm = 0.0
log_every = 1
validation_every = 0
[checkpoint]
every_steps = 0
export = {export}
[output]
dir = "out"
{block}"""


class Bench:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.work = Path(a.workdir).resolve()
        self.deadline = time.monotonic() + a.budget_s
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                    "PYTHONUNBUFFERED": "1"}
        self.doc: dict = {"mode": "smoke" if a.smoke else "gpu", "date": dt.datetime.now(dt.timezone.utc).isoformat(
            timespec="seconds"), "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "settings": {"seq_len": a.seq_len, "micro_batch_size": a.micro_batch, "steps": a.steps,
                         "warmup": a.warmup, "precision": a.precision, "processes": 1},
            "ratio_target": RATIO_TARGET, "rows": [], "failures": []}

    # -- subprocesses ---------------------------------------------------------------------
    def left(self) -> float:
        return self.deadline - time.monotonic()

    def sh(self, name: str, cmd: list[str], cwd: Path, env: dict | None = None, cap: float = 600) -> dict:
        """Run `cmd` (own process group, killed at the budget or `cap`); output in logs/NAME.log."""
        log = self.work / "logs" / f"{name.replace('+', '_')}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        timeout = min(cap, self.left())
        if timeout < 15:
            return {"status": "skipped", "error": "time budget"}
        t0 = time.monotonic()
        with open(log, "w") as fh:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env or self.env, stdout=fh, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = None
        out = {"status": "ok" if rc == 0 else "failed", "seconds": round(time.monotonic() - t0, 1), "log": str(log)}
        if rc != 0:
            out["error"] = f"timed out after {timeout:.0f} s" if rc is None else f"exit status {rc}"
            out["tail"] = log.read_text(errors="replace")[-1500:]
        return out

    def py(self, name: str, args: list[str], cwd: Path, **kw) -> dict:
        return self.sh(name, [sys.executable, *args], cwd, **kw)

    def save(self) -> None:
        self.doc["elapsed_s"] = round(self.a.budget_s - self.left(), 1)
        if self.a.json_out:
            Path(self.a.json_out).write_text(json.dumps(self.doc, indent=2, sort_keys=True) + "\n")

    # -- setup ----------------------------------------------------------------------------
    def setup(self) -> None:
        (self.work / "logs").mkdir(parents=True, exist_ok=True)
        dev = self.doc["device"] = self.device()
        self.doc["model"] = json.loads(self.capture([sys.executable, str(STEPS), "make-model",
                                                     str(self.work / "model"), json.dumps(self.model_config()),
                                                     "cuda" if dev["gpu"] else "cpu"]))
        tokens = (max(self.a.steps, 8) + 2) * self.a.micro_batch * self.a.seq_len
        write_corpus(self.work / "corpus.jsonl", tokens)
        self.launch_ok = self.sh("tuner-launch-help", [sys.executable, "-m", "tuner", "launch", "--help"],
                                 self.work)["status"] == "ok"
        self.doc["tuner_launch_available"] = self.launch_ok
        self.prebuild = None
        if dev["gpu"] and any(s.startswith("zero") for s in self.a.strategies):
            # DeepSpeed JIT-builds its Adam ops on first use (nvcc, g++): start now, in parallel.
            # MAX_JOBS leaves cores to the runs being timed meanwhile.
            with open(self.work / "logs" / "ds-ops.log", "w") as log:  # the child keeps its own handle
                self.prebuild = subprocess.Popen([sys.executable, str(STEPS), "build-ds-ops"], cwd=self.work,
                                                 env={"MAX_JOBS": "6", **self.env}, stdout=log,
                                                 stderr=subprocess.STDOUT, start_new_session=True)
            self.prebuild_t0 = time.monotonic()

    def capture(self, cmd: list[str]) -> str:
        r = subprocess.run(cmd, capture_output=True, text=True, env=self.env, cwd=self.work)
        if r.returncode:
            sys.exit(f"{' '.join(cmd[:4])} failed:\n{r.stderr[-3000:]}")
        return r.stdout.strip().splitlines()[-1]

    def model_config(self) -> dict:
        if not self.a.smoke:
            return dict(GPU_MODEL, max_position_embeddings=max(2048, self.a.seq_len))
        from tuner.compiler.read.builtin_models import config_dict  # plain dicts, no torch

        return config_dict("tiny-llama")

    def device(self) -> dict:
        if self.a.smoke:
            return {"gpu": False, "name": f"cpu ({os.cpu_count()} cores)", "peak_bf16_tflops": None,
                    "peak_source": "none: MFU is not computed on CPU"}
        # cwd: not the repository root, whose tuner/ folder would shadow the installed package.
        facts = json.loads(subprocess.run([sys.executable, "-m", "tuner", "doctor", "--json"], capture_output=True,
                                          text=True, env=self.env, cwd=self.work).stdout or "{}")
        gpus = facts.get("gpus") or []
        if not gpus:
            sys.exit("gpu_acceptance: `tuner doctor` sees no GPU; use --smoke on CPU machines")
        name = gpus[0]["name"]
        peak, source = (self.a.peak_tflops, "--peak-tflops") if self.a.peak_tflops else peak_for(name)
        return {"gpu": True, "name": name, "memory_bytes": gpus[0]["memory_bytes"], "count": len(gpus),
                "peak_bf16_tflops": peak, "peak_source": source, "versions": facts.get("versions", {})}

    # -- one strategy ---------------------------------------------------------------------
    def strategy(self, name: str) -> None:
        label, block = STRATEGIES[name]
        row: dict = {"strategy": name, "label": label}
        self.doc["rows"].append(row)
        d = self.work / name.replace("+", "_")
        d.mkdir(parents=True, exist_ok=True)
        steps, warmup = (self.a.offload_steps, self.a.offload_warmup) if name in OFFLOADED else (self.a.steps,
                                                                                                 self.a.warmup)
        row.update(steps=steps, warmup=warmup)
        export = name in self.a.export_check
        (d / "settings.toml").write_text(SETTINGS.format(
            model_dir=self.work / "model", data=self.work / "corpus.jsonl", seq=self.a.seq_len,
            platform="cpu" if self.a.smoke else "cuda", precision=self.a.precision, micro=self.a.micro_batch,
            steps=steps, lr=self.a.lr, export="true" if export else "false", block=block))
        row["compile"] = self.compile(d)
        if not row["compile"]["ok"]:
            row["status"] = "refused by the compiler"
            return
        row["plan"] = row["compile"]["plan_strategy"]
        row["estimate_per_gpu_bytes"], row["estimate_device_total_bytes"] = self.estimate(d)
        if self.a.smoke and name not in self.a.smoke_run:
            row["status"] = "compiled only (smoke)"
            return
        if name.startswith("zero") and self.prebuild is not None and not self.wait_prebuild():
            # A killed build leaves torch's extension lock behind: a run would wait on it forever.
            row["status"] = "failed"
            row["tuner_run"] = {"status": "failed", "error": "DeepSpeed's Adam ops did not build (see deepspeed_ops)"}
            return
        trace = d / "trace"
        # The trace (rank0.json: peak GPU memory, logits) comes from the tests' trainer callback;
        # its ranks import it from the repository root.
        pythonpath = os.pathsep.join(p for p in (str(HERE.parent), self.env.get("PYTHONPATH", "")) if p)
        run = row["tuner_run"] = self.py(f"{name}-tuner-run", ["-m", "tuner", "run", "build", "--callback",
                                                               "tests.runtime.trace_callbacks:trace"], d,
                                         env={**self.env, "TUNER_TEST_TRACE_DIR": str(trace), "PYTHONPATH": pythonpath})
        if run["status"] == "ok":
            run.update(self.run_figures(d / "out" / "metrics.jsonl", trace / "rank0.json", warmup))
            if run["peak_bytes"] and row["estimate_per_gpu_bytes"]:
                row["peak_over_estimate"] = round(run["peak_bytes"] / row["estimate_per_gpu_bytes"], 3)
        row["status"] = run["status"]
        if export and run["status"] == "ok":
            row["export"] = self.check_export(d, trace / "rank0.json", name)
        row["plain"] = self.plain(name, d, direct=not self.launch_ok)
        if run.get("tokens_per_s") and row["plain"].get("tokens_per_s"):
            row["ratio_tuner_plain"] = round(run["tokens_per_s"] / row["plain"]["tokens_per_s"], 3)

    def control(self) -> None:
        """With time left: the plain loop of the first strategy that ran, started directly (the
        launcher `tuner run` uses) instead of through `tuner launch`: the two should agree."""
        row = next((r for r in self.doc["rows"] if r.get("plain", {}).get("launcher") == "tuner launch"), None)
        if row is not None:
            row["plain_direct"] = self.plain(row["strategy"], self.work / row["strategy"].replace("+", "_"), direct=True)

    def compile(self, d: Path) -> dict:
        r = subprocess.run([sys.executable, "-m", "tuner", "compile", "settings.toml", "--out", "build", "--format",
                            "json"], cwd=d, capture_output=True, text=True, env=self.env)
        try:
            diags = json.loads(r.stdout or "{}")
        except json.JSONDecodeError:
            diags = {}
        items = diags.get("diagnostics", diags if isinstance(diags, list) else [])
        errors = [f"{x.get('key', '')}: {x.get('message', '')}" for x in items if x.get("severity") == "error"]
        out = {"ok": r.returncode == 0, "exit_status": r.returncode}
        if r.returncode:
            out["reason"] = "; ".join(errors) or (r.stderr or r.stdout).strip()[-800:]
        else:
            out["plan_strategy"] = diags.get("strategy")
        return out

    def estimate(self, d: Path) -> tuple[int | None, int | None]:
        """`tuner estimate --json`: (per-GPU bytes, the rank's device-side total); per-GPU is
        None on CPU targets, where the 'device' share lives in host RAM."""
        r = subprocess.run([sys.executable, "-m", "tuner", "estimate", "settings.toml", "--json"], cwd=d,
                           capture_output=True, text=True, env=self.env)
        try:
            chosen = json.loads(r.stdout)["chosen"]
        except (json.JSONDecodeError, KeyError, TypeError):
            return None, None
        return chosen["per_gpu"] or None, chosen["device"]["total"]

    def run_figures(self, metrics: Path, trace: Path, warmup: int) -> dict:
        rows = [json.loads(x) for x in metrics.read_text().splitlines() if '"loss"' in x]
        t = rows[max(0, warmup - 1):]  # from the end of step `warmup` (row 0 ends step 1)
        secs = t[-1]["time"] - t[0]["time"]
        tr = json.loads(trace.read_text())
        out = {"steps_per_s": (len(t) - 1) / secs, "tokens_per_s": (t[-1]["tokens_seen"] - t[0]["tokens_seen"]) / secs,
               "parameters": tr.get("total_params"), "peak_bytes": tr.get("cuda_max_memory_allocated"),
               "final_loss": rows[-1]["loss"]}
        return self.with_mfu(out)

    def with_mfu(self, out: dict) -> dict:
        peak = self.doc["device"].get("peak_bf16_tflops")
        params = out.get("parameters") or self.doc["model"]["parameters"]
        out["mfu"] = round(6 * params * out["tokens_per_s"] / (peak * 1e12), 4) if peak else None
        out["steps_per_s"], out["tokens_per_s"] = round(out["steps_per_s"], 3), round(out["tokens_per_s"], 1)
        return out

    def plain(self, name: str, d: Path, direct: bool) -> dict:
        """The plain accelerate loop on this strategy's build, through `tuner launch` or direct."""
        row = next(r for r in self.doc["rows"] if r["strategy"] == name)
        result = d / f"plain-{'direct' if direct else 'tuner-launch'}.json"
        args = [str(d / "build"), "--steps", str(row["steps"]), "--warmup", str(row["warmup"]), "--result", str(result)]
        launcher = [str(PLAIN), "--launch"] if direct else ["-m", "tuner", "launch", "build", str(PLAIN)]
        out = self.py(f"{name}-plain-{'direct' if direct else 'tuner-launch'}", [*launcher, *args], d)
        out["launcher"] = "direct (the launcher tuner run uses)" if direct else "tuner launch"
        if out["status"] == "ok":
            r = json.loads(result.read_text())
            steps_per_s = (r["steps"] - r["warmup"]) / r["seconds"]
            out.update(self.with_mfu({"steps_per_s": steps_per_s, "tokens_per_s": steps_per_s * r["tokens_per_step"],
                                      "peak_bytes": r["cuda_max_memory_allocated"]}))
        return out

    def check_export(self, d: Path, trace: Path, name: str) -> dict:
        r = self.py(f"{name}-export-check", [str(STEPS), "check-export", str(d / "build"), str(trace),
                                             str(d / "out" / "final"), str(self.work / "model")], d)
        if r["status"] == "ok":
            r.update(json.loads(Path(r["log"]).read_text().strip().splitlines()[-1]))
            r["status"] = "ok" if r["match"] else "failed"
            if r["untrained_max_abs_diff"] <= r["tolerance"]:
                r["status"], r["error"] = "failed", "the untrained weights match too: the check cannot tell them apart"
            elif not r["match"]:
                r["error"] = f"logits differ by {r['max_abs_diff']:.3g} > tolerance {r['tolerance']:.3g}"
        return r

    def wait_prebuild(self) -> bool:
        """Wait for the DeepSpeed op build started in setup; True when it succeeded."""
        if "deepspeed_ops" in self.doc:
            return self.doc["deepspeed_ops"]["exit_status"] == 0
        try:
            rc = self.prebuild.wait(timeout=max(1.0, self.left() - 60))
        except subprocess.TimeoutExpired:
            os.killpg(self.prebuild.pid, signal.SIGKILL)
            rc = None
        log = (self.work / "logs" / "ds-ops.log").read_text(errors="replace")
        self.doc["deepspeed_ops"] = {"exit_status": rc, "seconds": round(time.monotonic() - self.prebuild_t0, 1),
                                     "tail": log[-800:]}
        return rc == 0

    # -- verdict and table ----------------------------------------------------------------
    def judge(self) -> None:
        fails = self.doc["failures"]
        for row in self.doc["rows"]:
            name = row["strategy"]
            if row["status"] in ("refused by the compiler", "compiled only (smoke)"):
                continue
            for part in ("tuner_run", "plain", "plain_direct", "export"):
                status = row.get(part, {}).get("status", "ok")
                optional = part == "plain_direct" and status == "skipped"  # the control runs only with time left
                if status != "ok" and not optional:
                    fails.append(f"{name}: {part} {status}: {row[part].get('error', '')}".rstrip(": "))
        notes = self.doc.setdefault("notes", [])
        if not self.launch_ok:
            note = "tuner launch: not available (`tuner launch --help` failed)"
            if self.a.smoke:
                notes.append(note + "; the plain loop was started directly")
            else:
                fails.append(note)
        if self.a.smoke:
            notes.append("smoke: the rates are not measurements (a tiny model, a few steps, a shared CPU); "
                         "the smoke proves the code path, not the figures")
        self.doc["ok"] = not fails

    def table(self) -> str:
        """The result as a Markdown table (what docs/benchmarks.md shows), with its notes."""
        dev, m = self.doc["device"], self.doc["model"]
        peak = (f"{dev['peak_bf16_tflops']:.0f} TFLOP/s dense bf16 ({dev['peak_source']})"
                if dev.get("peak_bf16_tflops") else dev["peak_source"])
        head = ["strategy", "plan", "steps/s", "tokens/s", "MFU", "peak alloc GiB", "estimate GiB", "peak/est",
                "plain loop tokens/s", "ratio", "export logits"]
        lines = [f"{self.doc['date']}, {dev['name']}; MFU against {peak}", f"command: {self.doc['command']}",
                 f"model: {m['parameters'] / 1e6:,.1f}M parameters ({m['layers']} layers x {m['hidden']}), "
                 f"seq {self.a.seq_len}, micro batch {self.a.micro_batch}, precision {self.a.precision}, 1 process",
                 "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.doc["rows"]:
            run, plain, ex = r.get("tuner_run", {}), r.get("plain", {}), r.get("export")
            cells = [r["label"], r.get("plan", "-")]
            if run.get("status") == "ok":
                ratio = r.get("ratio_tuner_plain")
                cells += [f"{run['steps_per_s']:.2f}", f"{run['tokens_per_s']:,.0f}", _pct(run["mfu"]),
                          _gib(run["peak_bytes"]), _gib(r.get("estimate_per_gpu_bytes")), r.get("peak_over_estimate", "-"),
                          f"{plain['tokens_per_s']:,.0f}" if plain.get("tokens_per_s") else plain.get("status", "-"),
                          "-" if ratio is None else f"{ratio:.3f} {'✔' if ratio >= RATIO_TARGET else '✘'}",
                          "-" if ex is None else (f"{'match' if ex.get('match') else ex['status']}"
                                                  f" (max diff {ex.get('max_abs_diff', float('nan')):.1e})")]
            else:
                why = r["compile"].get("reason") or run.get("error") or r["status"]
                cells += [f"{r['status']}: {why}" if run else why] + [""] * (len(head) - 3)
            lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
        how = next((r["plain"]["launcher"] for r in self.doc["rows"] if "plain" in r), "-")
        lines += ["", f"ratio = tuner run tokens/s / plain accelerate loop tokens/s (target >= {RATIO_TARGET}); "
                      f"the plain loop was started by: {how}"]
        for r in self.doc["rows"]:
            if r.get("plain_direct", {}).get("tokens_per_s"):
                lines.append(f"control ({r['label']}): the plain loop started directly ran "
                             f"{r['plain_direct']['tokens_per_s']:,.0f} tokens/s, through tuner launch "
                             f"{r['plain'].get('tokens_per_s') or 0:,.0f}")
        if "deepspeed_ops" in self.doc:
            ops = self.doc["deepspeed_ops"]
            lines.append(f"DeepSpeed ops JIT build (in parallel with the first runs): exit {ops['exit_status']}, "
                         f"{ops['seconds']} s")
        lines += self.doc["notes"]
        lines += [f"FAILED: {f}" for f in self.doc["failures"]] or ["all checks passed"]
        return "\n".join(lines)


def peak_for(device_name: str) -> tuple[float | None, str]:
    """(peak dense bf16 TFLOP/s, where it came from) for a CUDA device name."""
    for key, tflops in PEAK_BF16_TFLOPS:
        if re.search(rf"\b{re.escape(key)}\b", device_name):
            return tflops, f"datasheet figure for {key}"
    return None, f"unknown for {device_name!r}: pass --peak-tflops"


def _gib(b) -> str:
    return f"{b / GIB:.2f}" if b else "-"


def _pct(x) -> str:
    return f"{100 * x:.1f}%" if x is not None else "-"


def write_corpus(path: Path, tokens: int) -> None:
    """Synthetic documents (seeded words) with comfortably more than `tokens` tokens."""
    import random

    rng = random.Random(0)
    words = ["gpu", "shard", "rank", "tensor", "adam", "offload", "batch", "layer", "token", "memory", "stream",
             "kernel", "gather", "reduce", "scatter", "step", "loss", "model", "train", "config"]
    docs, chars = [], 0
    while chars < tokens * 4:
        doc = " ".join(rng.choice(words) for _ in range(200)) + "."
        docs.append(json.dumps({"text": doc}))
        chars += len(doc)
    path.write_text("\n".join(docs) + "\n")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="CPU, tiny model, 3 steps: the suite's test of this script")
    p.add_argument("--json-out", default="", help="write the table as JSON here")
    p.add_argument("--workdir", default="", help="where models, builds and logs go (default: a new temp dir)")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated, from: " + ", ".join(STRATEGIES))
    p.add_argument("--export-check", default=None, help="strategies whose export is checked (default fsdp2,zero3)")
    p.add_argument("--smoke-run", default="fsdp2", help="strategies --smoke trains (the others compile only)")
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--micro-batch", type=int, default=None)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None, help="steps not timed")
    p.add_argument("--offload-steps", type=int, default=None, help="steps for the CPU-offload strategies")
    p.add_argument("--offload-warmup", type=int, default=None)
    p.add_argument("--budget-s", type=float, default=None, help="stop starting work after this many seconds")
    p.add_argument("--peak-tflops", type=float, default=None, help="the device's peak dense bf16 TFLOP/s")
    a = p.parse_args(argv)
    gpu = {"seq_len": 2048, "micro_batch": 4, "steps": 20, "warmup": 5, "offload_steps": 6, "offload_warmup": 2,
           "budget_s": 520.0, "precision": "bf16", "lr": 3e-4, "export_check": "fsdp2,zero3"}
    smoke = {"seq_len": 32, "micro_batch": 2, "steps": 4, "warmup": 2, "offload_steps": 4, "offload_warmup": 2,
             "budget_s": 300.0, "precision": "no", "lr": 1e-2, "export_check": "fsdp2"}
    for k, v in (smoke if a.smoke else gpu).items():
        if getattr(a, k, None) is None:
            setattr(a, k, v)
    a.strategies = [s for s in a.strategies.split(",") if s]
    unknown = [s for s in a.strategies if s not in STRATEGIES]
    if unknown:
        p.error(f"unknown strategies {unknown}; choose from {', '.join(STRATEGIES)}")
    a.export_check = a.export_check.split(",")
    a.smoke_run = a.smoke_run.split(",")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if not a.workdir:
        import tempfile

        a.workdir = tempfile.mkdtemp(prefix="gpu-acceptance-")
    b = Bench(a)
    b.setup()
    b.save()
    for name in a.strategies:
        b.strategy(name)
        b.save()
    if b.launch_ok and not a.smoke:
        b.control()
    b.judge()
    b.save()
    print(b.table())
    return 0 if b.doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
