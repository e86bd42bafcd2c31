#!/usr/bin/env bash
# Prebuild DeepSpeed's CPU optimizer ops (cpu_adam, cpu_adagrad, fused_adam, cpu_lion, shm_comm) once
# into a reusable torch-extensions cache, so tests and harness runs only load them.
#
#   scripts/build_deepspeed_ops.sh [DIR]        # default: oracle.compare.targets.deepspeed.default_extensions_dir()
#   OPS=cpu_adam,cpu_adagrad scripts/build_deepspeed_ops.sh
#   PYTHON=.venv/bin/python scripts/build_deepspeed_ops.sh
#
# The default directory is the one cache CI (.ci/run), the main job and the tests
# share (the harness picks the same folder itself when TORCH_EXTENSIONS_DIR is unset):
# keyed by python/torch/deepspeed versions, torch's git revision and SIMD level (-march=native),
# not by install paths: every venv of those versions (each fresh CI clone) shares the built ops.
# Each op says whether it is cached or why it is built.
# Timings on 2 cores (AVX-512): cpu_adam ~73 s, cpu_adagrad ~40 s, fused_adam ~116 s, cpu_lion ~35 s, shm_comm ~20 s;
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
echo "DeepSpeed CPU ops: cache $TORCH_EXTENSIONS_DIR" >&2
"$PY" -m oracle.compare.targets.deepspeed --print-key >&2
start=$(date +%s)
"$PY" -m oracle.compare.targets.deepspeed --build "$TORCH_EXTENSIONS_DIR" ${OPS:+--ops "$OPS"}
echo "total $(( $(date +%s) - start )) s; export TORCH_EXTENSIONS_DIR=$TORCH_EXTENSIONS_DIR" >&2
