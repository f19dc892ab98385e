#!/usr/bin/env bash
# One device-tool call for issue 43's decode megakernel (kernels/decode), every step under its own
# time limit (a hung persistent kernel must not take the whole call), logs in $OUT. All steps'
# limits add up to more than one 600 s call: pick STEPS for a call; the order is what matters most
# first.
#   device run, carry ["bazel-bin/kernels/decode", "bazel-bin/experiments", "bazel-bin/kernels/attention"]:
#     bash experiments/device_run/decode_device_run.sh
#   STEPS="smoke check batch bench timeline pair counterexample sanitize moe ncu"   (default: all, in this order;
#     moe needs bazel-bin/kernels/gpt_oss_120b.cubin and .manifest.json carried as well)
#   CONTEXTS=16,1024,4096,8192,32768   bench's contexts; COMPILE=1024 where torch.compile is timed; ROUNDS=7
#   ALSO=path/to/llama3_1b_prev.cubin   an earlier build timed in bench's rounds (carry its folder)
#   needs tools/bazel build //kernels/decode/... //experiments:llama_tiny_mutations
#         //kernels/attention:attn_causal //kernels/attention:attn_causal_d64 --output_groups=+control
#   and any candidates not yet measured (tagged manual, so CI does not build them), with their sass tests:
#         tools/bazel test $(tools/bazel query 'attr(tags, "manual", //kernels/decode:*)') --output_groups=+control
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/device_run/device_env.sh
OUT=${OUT:-/tmp/decode_out}; mkdir -p "$OUT"
STEPS=${STEPS:-smoke check batch bench timeline pair counterexample sanitize moe ncu}
rc=0
B=benchmarks/llama_decode_bench.py
if has smoke; then  # one short run first: a kernel that hangs or is wrong here stops the call
  TAIL=2 step smoke 60 python3 $B worker-check --model llama_tiny --steps 20
  [[ $rc -ne 0 ]] && { TAIL=40 step trace 90 python3 tests/kernels/decode_trace.py --steps 2
    for a in "--attention simple" "--unfused" "--control"; do
    TAIL=2 step "smoke${a// /_}" 45 python3 $B worker-check --model llama_tiny --steps 20 $a; done; exit 1; }
fi
has tests && step tests 420 python3 -m pytest -q tests/kernels/test_llama_megakernel_gpu.py
has check && TAIL=13 step check 200 python3 $B check --watchdog 45
# batch > 1 (llama_tiny_b3, llama3_1b_b4 / _b8): ragged batches against the fp32 reference, then
# batch 8, 4, 1 per step beside a batch-8 torch.compile step and the batch-8 control
has batch && TAIL=4 step batch_check 300 python3 benchmarks/llama_decode_batch_bench.py check --watchdog 70
has batch && TAIL=14 step batch_bench 200 python3 benchmarks/llama_decode_batch_bench.py bench --contexts 1024,4096 \
  --batches 8,4,1 --compile-batch 8 --control --rounds ${ROUNDS:-4}
has bench && TAIL=9 step bench 200 python3 $B bench --contexts ${CONTEXTS:-16,1024,4096,8192,32768} \
  --compile-contexts ${COMPILE:-1024} --torch-max-context 8192 --rounds ${ROUNDS:-7} ${ALSO:+--also $ALSO}
has timeline && for b in ${TIMELINE_BUILDS:-llama3_1b_trace}; do for c in ${TIMELINE:-1024 16}; do  # op by op
  TAIL=8 step timeline_${b}_$c 60 python3 benchmarks/llama_decode_timeline.py --build $b --context $c; done; done
has pair && step pair 200 python3 $B pair --batches 1,8,32 --rounds 5
has counterexample && step counterexample 45 python3 $B counterexample --watchdog 20
has sanitize && TAIL=10 step sanitize 420 python3 $B sanitize --steps 4 --watchdog 200
# Issue 41's gpt-oss target on the same machine: its f64 check (carry its cubin and manifest too)
has moe && TAIL=8 step moe_gpt_oss 90 python3 benchmarks/moe_bench.py check --model gpt_oss_120b --tokens 1,16,128,1024,4096
has ncu && TAIL=40 step ncu 60 ncu --clock-control none --kernel-name llama_decode --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
  python3 $B worker-check --model llama3_2_1b --steps 6
exit $rc
