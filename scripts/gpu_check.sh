#!/usr/bin/env bash
# One-shot GPU check from a clean checkout, for a person with one NVIDIA GPU (sized for an H200):
#   bash scripts/gpu_check.sh
# Creates a venv (.venv-gpu), installs the CUDA build of torch and the project with its test extra,
# then runs scripts/gpu_suite.py: require a GPU, build our kernels, pytest -m gpu (including the
# >2^31-element tensor test, guarded by free memory), oracle.compare on cuda, the kernel benchmark.
# Everything it writes, install logs included, lands in one folder (default reports/gpu/).
# The whole run is held to GPU_CHECK_BUDGET_S (default 470 s, under 8 minutes) by per-step `timeout`s
# and a budget passed to the suite. Exit status: 0 all passed, 3 no usable GPU,
# 124 an install step timed out, 1 anything else.
#
# Settings (environment): TORCH_INDEX_URL, TORCH_VERSION, GPU_CHECK_VENV, GPU_REPORT_DIR, PYTHON,
# GPU_CHECK_BUDGET_S, GPU_TIMEOUT_<STEP>, and pip's own PIP_* (PIP_FIND_LINKS + PIP_NO_INDEX=1 offline).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$SECONDS
budget=${GPU_CHECK_BUDGET_S:-470}
report_dir=${GPU_REPORT_DIR:-reports/gpu}
venv=${GPU_CHECK_VENV:-.venv-gpu}
python=${PYTHON:-python3}
torch_version=${TORCH_VERSION:-2.13.0}
torch_index=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cu128}

left() { echo $((budget - (SECONDS - start))); }
step_limit() {  # min(the step's own limit, what is left of the budget)
  local own=$1 rest
  rest=$(left)
  if [ "$rest" -lt 5 ]; then
    echo "gpu_check: out of time (budget ${budget} s)" >&2
    exit 1
  fi
  if [ "$own" -lt "$rest" ]; then echo "$own"; else echo "$rest"; fi
}

mkdir -p "$report_dir/logs"
log=$report_dir/logs/install.log
: >"$log"

# 1. Refuse at once where there is no GPU: nothing is downloaded.
"$python" scripts/require_cuda.py --driver-only
trap 'echo "gpu_check: stopped at line $LINENO after $((SECONDS - start)) s (a time-out exits 124); see $log" >&2' ERR

# 2. Environment: a venv, the CUDA build of torch (skipped when the venv already has it), the project.
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv" 2>&1 | tee -a "$log"
fi
py=$venv/bin/python
if "$py" -c "import sys, torch; sys.exit(not (torch.version.cuda and torch.__version__.split('+')[0] == '$torch_version'))" 2>/dev/null; then
  echo "gpu_check: $venv already has a CUDA build of torch $torch_version" | tee -a "$log"
else
  lim=$(step_limit "${GPU_TIMEOUT_TORCH:-240}")
  timeout "$lim" "$py" -m pip install --index-url "$torch_index" "torch==$torch_version" 2>&1 | tee -a "$log"
fi
lim=$(step_limit "${GPU_TIMEOUT_PROJECT:-120}")
timeout "$lim" "$py" -m pip install "setuptools>=64" wheel 2>&1 | tee -a "$log"
lim=$(step_limit "${GPU_TIMEOUT_PROJECT:-120}")
timeout "$lim" "$py" -m pip install --no-build-isolation -e ".[test]" 2>&1 | tee -a "$log"
echo "gpu_check: environment ready after $((SECONDS - start)) s" | tee -a "$log"

# 3. The suite, with limits sized to one GPU and the rest of the budget (10 s kept for the summary).
export GPU_TIMEOUT_DEVICE=${GPU_TIMEOUT_DEVICE:-60}
export GPU_TIMEOUT_BUILD=${GPU_TIMEOUT_BUILD:-180}
export GPU_TIMEOUT_TESTS=${GPU_TIMEOUT_TESTS:-150}
export GPU_TIMEOUT_COMPARE=${GPU_TIMEOUT_COMPARE:-180}
export GPU_TIMEOUT_BENCH=${GPU_TIMEOUT_BENCH:-90}
FUSED_BUILD_DIR=${FUSED_BUILD_DIR:-$(cd "$venv" && pwd)/fused_build}
export FUSED_BUILD_DIR
rc=0
"$py" scripts/gpu_suite.py --report-dir "$report_dir" --budget-s "$(($(left) - 10))" || rc=$?

echo "gpu_check: finished in $((SECONDS - start)) s (budget ${budget} s), exit $rc"
echo "gpu_check: reports in $(cd "$report_dir" && pwd) (summary.md, steps.json, logs/)"
exit "$rc"
