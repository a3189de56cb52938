#!/usr/bin/env bash
# Set up (or reuse) .venv with tuner and everything it needs. Sourced by the other scripts.
#
# torch is installed first and on its own, so that pip does not pull a multi-GB CUDA build
# where a CPU wheel is wanted. Override which torch with TUNER_TORCH, e.g.
#   TUNER_TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128" scripts/test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
# DeepSpeed's JIT-built ops live with this environment (their build records its paths, so
# environments at other paths sharing ~/.cache/torch_extensions would rebuild them in turn).
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$PWD/.venv/torch_extensions}"
# Found without importing it (a warm rerun's set-up stays well under a second; importing torch
# takes seconds): a broken install is reported by the first test that imports it.
if ! python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)" >/dev/null 2>&1; then
    echo "installing ${TUNER_TORCH:-torch==2.13.0} ... (log: .venv/install.log)"
    # shellcheck disable=SC2086
    pip install ${TUNER_TORCH:-torch==2.13.0} >>.venv/install.log 2>&1 || { tail -30 .venv/install.log; exit 1; }
fi
# Re-install only when pyproject.toml changed since the last successful install.
stamp=.venv/.tuner-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "installing tuner and its dependencies ... (log: .venv/install.log)"
    # this checkout installed under its old distribution name, `tuner`: remove that first
    if pip show tuner 2>/dev/null | grep -qx "Editable project location: $PWD"; then
        pip uninstall -y tuner >>.venv/install.log 2>&1
    fi
    pip install -e ".[all]" >>.venv/install.log 2>&1 || { tail -30 .venv/install.log; exit 1; }
    touch "$stamp"
fi
