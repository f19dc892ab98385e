#!/usr/bin/env bash
# One device-tool call: GPU tests + check + sanitize + pair + bench of the Bazel-built kernels.
#   device run, carry ["bazel-bin/kernels", "bazel-bin/experiments", ".whl"]:
#     bash experiments/device_run/device_run.sh [SUBCOMMAND] [ARGS...]
# Installs carried wheels (.whl: liger-kernel) into /tmp/site; logs to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/device_run/device_env.sh
LOG=${OUT:-/tmp}/device_run.log
python3 benchmarks/gemm_swiglu_bench.py "${@:-all}" 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
