#!/usr/bin/env bash
# Prebuild DeepSpeed's CPU optimizer ops (cpu_adam, cpu_adagrad, fused_adam) once
# into a reusable torch-extensions cache, so tests and harness runs only load them.
#
#   scripts/build_deepspeed_ops.sh [DIR]        # default: oracle.compare.targets.deepspeed.default_extensions_dir()
#   OPS=cpu_adam,cpu_adagrad scripts/build_deepspeed_ops.sh
#   PYTHON=.venv/bin/python scripts/build_deepspeed_ops.sh
#
# Then export the printed TORCH_EXTENSIONS_DIR (the harness sets the same default
# itself when the variable is unset). The ops are compiled with -march=native, so
# the default directory is keyed by python/torch/deepspeed versions and SIMD level.
# Timings on 2 cores (AVX-512): cpu_adam ~73 s, cpu_adagrad ~40 s, fused_adam ~116 s;
# a cached load takes ~2 s (mostly importing deepspeed).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
export DS_ACCELERATOR=cpu
if [[ $# -ge 1 ]]; then
  export TORCH_EXTENSIONS_DIR="$1"
elif [[ -z "${TORCH_EXTENSIONS_DIR:-}" ]]; then
  TORCH_EXTENSIONS_DIR="$("$PY" -m oracle.compare.targets.deepspeed --print-dir)"
  export TORCH_EXTENSIONS_DIR
fi
mkdir -p "$TORCH_EXTENSIONS_DIR"
echo "building DeepSpeed CPU ops into $TORCH_EXTENSIONS_DIR" >&2
start=$(date +%s)
"$PY" -m oracle.compare.targets.deepspeed --build "$TORCH_EXTENSIONS_DIR" --ops "${OPS:-cpu_adam,cpu_adagrad,fused_adam}"
echo "total $(( $(date +%s) - start )) s; export TORCH_EXTENSIONS_DIR=$TORCH_EXTENSIONS_DIR" >&2
