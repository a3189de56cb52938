"""`tuner data SETTINGS [--rows N] [--json]`: the first training rows exactly as the trainer
sees them, before paying for GPUs.

For a causal LM: the format detected, the documents, rows, tokens, padding and rows dropped
for length, then each of the first N rows as text with its loss mask (trained tokens
highlighted on a terminal, masked ones dim; ``[...]`` around trained text otherwise), and under
``--json`` the rows' ``input_ids``, ``labels`` and ``position_ids``. The data goes through the
same pipeline (and cache) as `tuner run`. Exit 0, 1 (settings do not compile), 2 (data in
the wrong shape, named with file, row and fix).

For a diffusion model (`data_diffusion`): the images, their aspect buckets and the latent and
text-embedding cache's state (built, stale, missing entries), without building it.
"""

from __future__ import annotations

import json
import sys

from ..compiler.compile import compile_inputs
from ..compiler.diagnostics import EXIT_INVALID, EXIT_OK, EXIT_USAGE, render_text
from .settings_input import gather_or_exit_code

TRAINED, MASKED, RESET = "\x1b[1;32m", "\x1b[2m", "\x1b[0m"


def run(args) -> int:
    inputs = gather_or_exit_code(args)
    if isinstance(inputs, int):
        return inputs
    result = compile_inputs(inputs)
    if result.settings is None or not result.ok:
        print(render_text(result.diagnostics.errors) or "the settings do not compile", file=sys.stderr)
        return EXIT_INVALID
    s = result.settings
    if s.model.trained_family == "diffusion":
        from .data_diffusion import show

        return show(s, inputs.project_dir, args.json)
    if s.model.trained_family != "causal_lm":
        print(f"tuner data: shows causal-LM and diffusion data; model.family is {s.model.family!r}", file=sys.stderr)
        return EXIT_USAGE
    from ..runtime.data_sources.driver import rank_data
    from ..runtime.families import FamilyError
    from ..runtime.families.base import FamilyContext
    from ..runtime.families.causal_lm import CausalLMFamily

    fam = CausalLMFamily(FamilyContext(settings=s, base_dir=inputs.project_dir, seed=s.training.seed))
    try:
        data = rank_data(fam)  # the ranks' own driver: the rows exactly as they train on them
        rows = _first(data.train, args.rows)
    except FamilyError as exc:
        print(f"tuner data: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", EXIT_USAGE)
    stats = dict(data.stats, packed=bool(data.packed), seq_len=s.data.seq_len,
                 streamed=bool(s.data.streaming), completion_only_loss=bool(s.data.completion_only_loss))
    if args.json:
        print(json.dumps({"stats": stats, "rows": rows}, indent=1))
        return EXIT_OK
    tok = fam.tokenizer()
    colour = sys.stdout.isatty()
    print(_summary(stats))
    for n, row in enumerate(rows):
        trained = sum(1 for x in row["labels"] if x != -100)
        docs = sum(1 for p in row["position_ids"][: row["real"]] if p == 0) if stats["packed"] else 1
        print(f"\n--- row {n + 1}: {row['real']} tokens ({trained} trained), {docs} document(s) ---")
        print(_render(tok, row, colour))
    if not colour:
        print("\n(trained tokens are shown [in brackets]; on a terminal, in green)")
    return EXIT_OK


def _first(train, n: int) -> list[dict]:
    out: list[dict] = []
    for row in (train[i] for i in range(min(n, len(train)))) if hasattr(train, "__len__") else train:
        if len(out) >= n:
            break
        out.append({"input_ids": list(row["input_ids"]), "labels": list(row["labels"]),
                    "position_ids": list(row["position_ids"]), "real": int(row["real"][0])})
    return out


def _summary(st: dict) -> str:
    lines = [f"format: {st.get('format')}" + (" (streamed: statistics of the first rows only)" if st["streamed"] else "")]
    if st.get("documents") and not st["streamed"]:
        lines.append(f"documents: {st['documents']}, dropped for length (> data.seq_len = {st['seq_len']}): "
                     f"{st['dropped_for_length']}")
        how = "packed rows of " + str(st["seq_len"]) + " tokens" if st["packed"] else "padded rows (packing off)"
        lines.append(f"rows: {st['rows']} {how}; tokens: {st['real_tokens']} real, {st['trained_tokens']} trained; "
                     f"padding {st['padding_ratio']:.1%}")
        if "document_tokens" in st:
            d = st["document_tokens"]
            lines.append(f"document tokens: min {d['min']}, median {d['median']}, mean {d['mean']}, max {d['max']}")
    lines.append("loss on: " + ("completions / assistant turns only" if st["completion_only_loss"] else "every token"))
    return "\n".join(lines)


def _render(tok, row: dict, colour: bool) -> str:
    parts, state = [], None
    for i, (t, lab, p) in enumerate(zip(row["input_ids"][: row["real"]], row["labels"], row["position_ids"], strict=False)):
        text = tok.decode([t])
        if p == 0 and i:
            text = ("\n" + MASKED + "| " + RESET if colour else "\n| ") + text  # a new document
        on = lab != -100
        if colour:
            parts.append((TRAINED if on else MASKED) + text + RESET)
        else:
            if on != bool(state):
                parts.append("[" if on else "]")
            parts.append(text)
            state = on
    if not colour and state:
        parts.append("]")
    return "".join(parts)
