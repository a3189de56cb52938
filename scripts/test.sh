#!/usr/bin/env bash
# The whole test suite, set-up included:  scripts/test.sh [--fast] [pytest args]
#   --fast: the fast tier, every test that starts no rank and no terminal (marks `slow` and
#   `terminal`, tests/conftest.py; a rank started there refuses to run, naming the fix).
# Before pytest: the system packages some tests need (scripts/system-packages.sh: installed
# when missing and run as root, else one line naming them and the command). DeepSpeed's CPU
# ops (scripts/build_ops.py, once per virtual environment) are built beside the first tests,
# not before them: the tests that start no rank run first, and a test about to start
# DeepSpeed ranks waits for the ops it needs, saying so (tests/ops_wait.py). The fast tier
# needs no op. No test installs or builds anything itself.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/bootstrap.sh
bash scripts/system-packages.sh
# Hundreds of tuner processes (ranks, launchers, the CLI) start during the suite: let Python keep
# the bytecode of tuner's own modules (an editable install is not compiled by pip) in
# __pycache__ (git-ignored) instead of compiling them again in every process.
unset PYTHONDONTWRITEBYTECODE
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
fast=0
args=()
for a in "$@"; do
    if [ "$a" = "--fast" ]; then fast=1; else args+=("$a"); fi
done
marks=()
build_pid=""
if [ "$fast" = 1 ]; then
    export TUNER_TEST_FAST=1
    marks=(-m "not slow and not terminal")
    echo "the fast tier: every test that starts no rank and no terminal (DeepSpeed's ops are not needed)"
elif python scripts/build_ops.py --warm; then
    python scripts/build_ops.py
else
    export TUNER_OPS_LOG=.venv/build_ops.log TUNER_OPS_PROGRESS=.venv/build_ops.progress TUNER_TEST_RANKS_LAST=1
    : >"$TUNER_OPS_PROGRESS"
    echo "DeepSpeed ops: building in the background (log $TUNER_OPS_LOG); the tests that start no rank run first," \
         "and a test about to start DeepSpeed ranks waits for the ops it needs, saying so"
    # At the normal priority: tried at nice 19 (2026-12-07), the build took 1908 s instead of 669 s
    # (async I/O, last, 1444 s), and the rank tests that wait for its ops waited with it (a DeepSpeed
    # check 237 s, a ZeRO reader's set-up 162 s): that whole suite took 46 min 42 s (32 min 34 s the
    # round before, the build at normal priority; the nice is not the only change between the two).
    python scripts/build_ops.py >"$TUNER_OPS_LOG" 2>&1 &
    build_pid=$!
    export TUNER_OPS_BUILD_PID=$build_pid
fi
# Two workers by default (the suite's CI machine has 2 cores; many tests wait on ranks,
# terminals and launchers): whole files go to one worker, longest first (tests/conftest.py).
# TUNER_TEST_WORKERS=0 runs everything in this one process.
set +e
python -m pytest -q --durations=25 -n "${TUNER_TEST_WORKERS:-2}" --dist loadgroup --no-loadscope-reorder \
    ${marks[@]+"${marks[@]}"} ${args[@]+"${args[@]}"}
rc=$?
if [ -n "$build_pid" ]; then
    if kill -0 "$build_pid" 2>/dev/null; then
        echo "waiting for the DeepSpeed ops build to finish (pid $build_pid, log $TUNER_OPS_LOG)"
    fi
    wait "$build_pid"
    tail -n 1 "$TUNER_OPS_LOG"
fi
exit "$rc"
