#!/usr/bin/env bash
# One device-tool call: GPU tests + check + sanitize + pair + bench of the Bazel-built kernels.
#   device run, carry ["bazel-bin/kernels", ".whl"]:  bash benchmarks/device_run.sh [SUBCOMMAND] [ARGS...]
# Installs carried wheels (.whl: liger-kernel) into /tmp/site; logs to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/tools${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader
LOG=${OUT:-/tmp}/device_run.log
python3 benchmarks/gemm_swiglu_bench.py "${@:-all}" 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
