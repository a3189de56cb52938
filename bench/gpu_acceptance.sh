#!/usr/bin/env bash
# GPU acceptance (issue #15) in ONE call of the device tool, in two halves:
#
#   bash bench/gpu_acceptance.sh prepare      # here, where pip reaches the package registry:
#                                             # wheels for the GPU machine into .whl/ (git-ignored)
#   bash bench/gpu_acceptance.sh run [ARGS]   # there, on the lent GPU machine (no registry):
#                                             # install .whl/, run bench/gpu_acceptance.py ARGS
#
# The device call (docs/benchmarks.md, "GPU acceptance"): carry [".whl"], timeout_s 600,
#   command: bash bench/gpu_acceptance.sh run
# Its image has torch, accelerate, transformers, peft, PyYAML, numpy, psutil, ninja and nvcc,
# but not tuner, DeepSpeed (an sdist on PyPI: built here into a pure-Python wheel; its ops
# JIT-build there), pydantic, hjson, tomlkit, jsonschema or platformdirs. Run `prepare`
# again after changing tuner: the tuner wheel is built from this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
WHL=${TUNER_WHEELS:-.whl}
PY=${PYTHON:-python}   # here: the project's environment (its versions are the ones carried)
[ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && PY=.venv/bin/python
DEVICE_PY=${TUNER_DEVICE_PYTHON:-3.12}   # the GPU image's python3 (device README: KINDS.md)
# What the GPU image lacks, at the versions installed here (one version of each).
CARRIED="deepspeed hjson pydantic pydantic-core annotated-types typing-inspection typing-extensions
tomlkit jsonschema jsonschema-specifications referencing rpds-py platformdirs"

prepare() {
  # .whl/ is in .gitignore: the device tool carries it only when named in `carry`.
  rm -rf "$WHL" build/lib build/bdist.* && mkdir -p "$WHL"   # setuptools would reuse a stale build/lib
  "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WHL" .
  for name in $CARRIED; do
    version=$("$PY" -c "import importlib.metadata as m; print(m.version('$name'))")
    if [ "$name" = deepspeed ]; then
      "$PY" -m pip wheel -q --no-deps -w "$WHL" "deepspeed==$version"
    else
      "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$DEVICE_PY" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$WHL" "$name==$version"
    fi
  done
  ls -l "$WHL"
  du -sh "$WHL"
}

run() {
  [ -d "$WHL" ] || { echo "no $WHL/: run 'bash bench/gpu_acceptance.sh prepare' here and carry $WHL" >&2; exit 2; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHL"/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
  local out=${OUT:-output/gpu-acceptance}
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  # Not from the repository root: its tuner/ folder would shadow the installed package.
  (cd /tmp && python3 -m tuner --version)
  python3 bench/gpu_acceptance.py --json-out "$out/gpu_acceptance.json" --workdir /tmp/gpu-acceptance "$@" 2>&1 |
    tee "$out/gpu_acceptance.log"
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) echo "usage: bash bench/gpu_acceptance.sh prepare | run [gpu_acceptance.py ARGS]" >&2; exit 2 ;;
esac
