#!/usr/bin/env bash
# The whole test suite, set-up included:  scripts/test.sh [pytest args]
# Before pytest, and only then: the system packages some tests need (scripts/system-packages.sh:
# installed when missing and run as root, else one line naming them and the command) and
# DeepSpeed's CPU ops, built once per virtual environment with the time printed
# (scripts/build_ops.py). No test installs or builds anything itself.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/bootstrap.sh
bash scripts/system-packages.sh
# Hundreds of tuner processes (ranks, launchers, the CLI) start during the suite: let Python keep
# the bytecode of tuner's own modules (an editable install is not compiled by pip) in
# __pycache__ (git-ignored) instead of compiling them again in every process.
unset PYTHONDONTWRITEBYTECODE
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
python scripts/build_ops.py
# Two workers by default (the suite's CI machine has 2 cores; many tests wait on ranks,
# terminals and launchers): whole files go to one worker, longest first (tests/conftest.py).
# TUNER_TEST_WORKERS=0 runs everything in this one process.
python -m pytest -q --durations=25 -n "${TUNER_TEST_WORKERS:-2}" --dist loadgroup --no-loadscope-reorder "$@"
