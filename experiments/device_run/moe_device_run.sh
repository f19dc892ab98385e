#!/usr/bin/env bash
# One device-tool call for issue 9's moe_step gates, every step under its own time limit (a hung
# persistent kernel must not take the whole call: it cost 767 device-seconds once), logs in $OUT.
#   device run, carry ["bazel-bin/kernels", "bazel-bin/experiments", ".whl"]:
#     bash experiments/device_run/moe_device_run.sh
#   STEPS="tests check trace pair bench sanitize ep cx models"   (default: all, in this order; STEPS=dsv3:
#     DeepSeek-V3's check and sanitizers, needs //kernels:deepseek_v3 built)
#   MODELS="qwen3_30b_a3b qwen3_235b_a22b olmoe_1b_7b mixtral_8x7b gpt_oss_120b"   the linked models (issue 41), for
#     `models`: MSTEPS="check bench pair sanitize ncu" of each (needs their targets built); OLD=dir
#     times the constant-header moe_step beside Qwen3-30B-A3B's target
#   BUILDS=name=dir,...   other builds' moe_step timed in bench's rounds (columns moe_step_<name>)
#   PIPELINK_SGLANG_DIR=dir   the unpacked sglang wheel: check and bench add SGLang's columns (moe_sglang.py)
#   needs //kernels:moe_step, :moe_step_swiglu2 (+control), :moe_step_trace, //experiments:moe_step_team
#   (manual) and the counterexample's mutations (//experiments/... builds them) in bazel-bin.
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/device_run/device_env.sh
OUT=${OUT:-/tmp/moe_out}; mkdir -p "$OUT"
STEPS=${STEPS:-tests check trace pair bench sanitize ep cx models}
rc=0
has tests && step tests 240 python3 -m pytest -q tests/kernels/test_moe_step.py tests/kernels/test_moe_ep.py
has check && step check 150 python3 benchmarks/moe_bench.py check ${BUILDS:+--builds $BUILDS}
has trace && step trace 60 python3 benchmarks/moe_trace.py --tokens 1,128,1024,4096,16384 --reps 3
has pair && TAIL=8 step pair 200 python3 benchmarks/moe_bench.py pair --rounds ${ROUNDS:-10}
has bench && TAIL=9 step bench 300 python3 benchmarks/moe_bench.py bench --rounds ${ROUNDS:-10} ${BUILDS:+--builds $BUILDS}
has sanitize && TAIL=10 step sanitize 570 python3 benchmarks/moe_sanitize.py --tokens 8  # 9 runs, ~450 s: a call of its own
has ep && step ep 120 python3 benchmarks/moe_ep_check.py check
has ep && step ep_memcheck 180 python3 benchmarks/moe_ep_check.py sanitize memcheck 16 2
has cx && TAIL=8 step cx 240 python3 experiments/symbol_link/symbol_link_counterexample.py --kernel moe_step --watchdog 4
if has models; then
  # Issue 41: each linked model's gates and figures. MSTEPS picks among check bench pair sanitize
  # ncu; OLD (a build directory of the constant-header moe_step) adds its column to Qwen3-30B-A3B's
  # check and bench.
  msteps=" ${MSTEPS:-check bench pair sanitize ncu} "
  T6=${MTOKENS:-1,16,128,1024,4096,16384}
  for M in ${MODELS:-qwen3_30b_a3b qwen3_235b_a22b olmoe_1b_7b mixtral_8x7b gpt_oss_120b}; do
    old=(); [[ $M == qwen3_30b_a3b && -n ${OLD:-} ]] && old=(--builds "old=$OLD")
    [[ $msteps == *" check "* ]] && step "check_$M" 300 python3 benchmarks/moe_bench.py check --model "$M" --tokens "$T6" "${old[@]}"
    [[ $msteps == *" bench "* ]] && TAIL=9 step "bench_$M" 420 python3 benchmarks/moe_bench.py bench --model "$M" \
      --rounds ${ROUNDS:-8} --tokens "$T6" "${old[@]}"
    [[ $msteps == *" pair "* ]] && TAIL=8 step "pair_$M" 200 python3 benchmarks/moe_bench.py pair --model "$M" \
      --rounds ${PAIR_ROUNDS:-20} --tokens "$T6"
    [[ $msteps == *" sanitize "* ]] && TAIL=8 step "sanitize_$M" 560 python3 benchmarks/moe_bench.py sanitize --model "$M"
    [[ $msteps == *" ncu "* ]] && TAIL=14 step "ncu_$M" 240 ncu --clock-control none --profile-from-start off \
      --metrics dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,gpu__time_duration.sum \
      python3 benchmarks/moe_bench.py profile --model "$M" --tokens 16,128
  done
fi
if has dsv3; then
  # DeepSeek-V3 (//kernels:deepseek_v3, 22.5 GB of weights): against its f64 reference (grouped
  # routing, the shared expert applied after the kernel), then each sanitizer at T = 1 and a
  # ragged T = 3, routed only (the kernel without the shared expert's torch GEMMs, whose cuBLAS
  # kernels racecheck reports; the worker prints RESULT correct). Not in the default STEPS: STEPS=dsv3.
  TAIL=8 step check_deepseek_v3 540 python3 tests/helpers/moe_model_check.py --model deepseek_v3 \
    --tokens ${DSV3_TOKENS:-1,16,37,128,1024,4096}
  # (racecheck takes about 430 s a T on an H100: one T a device call, DSV3_SANITIZE="racecheck:3")
  for run in ${DSV3_SANITIZE:-memcheck:1 memcheck:3 synccheck:1 synccheck:3 racecheck:1 racecheck:3}; do
    tool=${run%%:*} t=${run##*:}
    extra=(); [[ $tool == memcheck ]] && extra=(--report-api-errors no)
    TAIL=6 step "sanitize_deepseek_v3_${tool}_$t" 560 compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 9 \
      --print-limit 10 python3 tests/helpers/moe_model_check.py --model deepseek_v3 --routed-only --tokens $t
  done
fi
exit $rc
