#!/usr/bin/env bash
# The main job on a built-in example: compile a bundled settings file, then train a tiny
# Llama on two ranks with FSDP2 (real gloo ranks on a CPU-only machine, GPUs otherwise).
#   scripts/example.sh [examples/OTHER.toml]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/bootstrap.sh
settings=${1:-examples/fsdp2.toml}
name=$(basename "$settings" .toml)
tuner compile "$settings" --out "build/$name"
tuner run "build/$name"
