#!/usr/bin/env bash
# One device-tool call for issue 43's decode megakernel (kernels/decode), every step under its own
# time limit (a hung persistent kernel must not take the whole call), logs in $OUT.
#   device run, carry ["bazel-bin/kernels/decode", "bazel-bin/experiments"]:
#     bash experiments/device_run/decode_device_run.sh
#   STEPS="tests check counterexample pair sanitize bench ncu"   (default: all, in this order)
#   CONTEXTS=16,1024,4096,8192,32768   bench's contexts; ROUNDS=9
#   needs tools/bazel build //kernels/decode/... //experiments:llama_tiny_mutations --output_groups=+control
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/device_run/device_env.sh
OUT=${OUT:-/tmp/decode_out}; mkdir -p "$OUT"
STEPS=${STEPS:-tests check counterexample pair sanitize bench ncu}
rc=0
B=benchmarks/llama_decode_bench.py
has tests && step tests 420 python3 -m pytest -q tests/kernels/test_llama_megakernel_gpu.py
has check && TAIL=10 step check 420 python3 $B check --watchdog 120
has counterexample && step counterexample 300 python3 $B counterexample --watchdog 90
has pair && step pair 240 python3 $B pair --rounds ${ROUNDS:-9}
has sanitize && TAIL=12 step sanitize 580 python3 $B sanitize --steps 12 --watchdog 180
has bench && TAIL=9 step bench 580 python3 $B bench --contexts ${CONTEXTS:-16,1024,4096,8192,32768} --rounds ${ROUNDS:-9}
has ncu && TAIL=20 step ncu 300 ncu --clock-control none --kernel-name llama_decode --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis \
  python3 $B worker-check --model llama3_2_1b --steps 8
exit $rc
