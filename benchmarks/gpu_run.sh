#!/usr/bin/env bash
# The GPU run (H200, device tool): loads the prebuilt artifacts, links nothing.
#   1. pytest tests/test_runtime.py (GPU tests on the toy, and the gemm_swiglu wrapper)
#   2. gpu_bench.py check     correctness of every config, linked and control
#   3. gpu_bench.py bench     linked vs control timing (+ torch eager / torch.compile for gemm_swiglu)
#   4. gpu_bench.py sanitize  compute-sanitizer memcheck, racecheck, synccheck on each linked kernel
# Build the artifacts first, HERE (needs z3 + nvcc): benchmarks/build_artifacts.sh .devbuild
# Then, through the device tool, with carry [".devbuild"]:
#   benchmarks/gpu_run.sh .devbuild                         # everything
#   benchmarks/gpu_run.sh .devbuild --kernels toy --quick   # the toy smoke run
# Options: --kernels LIST (toy,gemm_swiglu,gemm_swiglu_wgmma), --quick (fewer shapes, one sanitized config per
# kernel), --no-compile (skip torch.compile), --no-sanitize, --no-bench, --reps N, --inner N.
# When $OUT is set: the log goes to $OUT/gpu_run.log, timings to $OUT/bench.json, and every
# compute-sanitizer report in full to $OUT/sanitize.log.
set -uo pipefail
cd "$(dirname "$0")/.."
A=.devbuild
KERNELS=""
QUICK=""
COMPILE=""
SANITIZE=1
BENCH=1
BENCH_ARGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --kernels) KERNELS=$2; shift ;;
    --quick) QUICK=--quick ;;
    --no-compile) COMPILE=--no-compile ;;
    --no-sanitize) SANITIZE=0 ;;
    --no-bench) BENCH=0 ;;
    --reps|--inner|--compile-mode) BENCH_ARGS+=("$1" "$2"); shift ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) A=$1 ;;
  esac
  shift
done
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD/tools${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
KARG=()
[ -n "$KERNELS" ] && KARG=(--kernels "$KERNELS")
LOG=/dev/null
JSON=()
SANLOG=()
if [ -n "${OUT:-}" ]; then LOG=$OUT/gpu_run.log; JSON=(--json "$OUT/bench.json"); SANLOG=(--log "$OUT/sanitize.log"); fi

run() {
  local rc=0
  echo "== env"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1
  "$PY" -c "import sys, torch, numpy; from cuda import bindings; import cuda.core as cc; print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda-bindings', bindings.__version__, '| cuda-core', cc.__version__, '| numpy', numpy.__version__)" 2>&1
  echo "artifacts: $A ($(du -sh "$A" 2>/dev/null | cut -f1)); commit $("$PY" -c "import json; print(json.load(open('$A/index.json'))['commit'])" 2>/dev/null)"
  t0=$SECONDS
  echo "== pytest tests/test_runtime.py"
  local kexpr=()
  [[ -n "$KERNELS" && "$KERNELS" != *gemm_swiglu* ]] && kexpr=(-k "not gemm_swiglu")
  PIPELINK_ARTIFACTS=$A "$PY" -m pytest -q -rs -p no:cacheprovider tests/test_runtime.py "${kexpr[@]}" || rc=1
  echo "   ($((SECONDS - t0)) s)"; t0=$SECONDS
  echo "== check"
  "$PY" benchmarks/gpu_bench.py check --artifacts "$A" "${KARG[@]}" || rc=1
  echo "   ($((SECONDS - t0)) s)"; t0=$SECONDS
  if [ $BENCH = 1 ]; then
    echo "== bench"
    "$PY" benchmarks/gpu_bench.py bench --artifacts "$A" "${KARG[@]}" $QUICK $COMPILE "${BENCH_ARGS[@]}" "${JSON[@]}" || rc=1
    echo "   ($((SECONDS - t0)) s)"; t0=$SECONDS
  fi
  if [ $SANITIZE = 1 ]; then
    echo "== sanitize"
    "$PY" benchmarks/gpu_bench.py sanitize --artifacts "$A" "${KARG[@]}" $QUICK "${SANLOG[@]}" || rc=1
    echo "   ($((SECONDS - t0)) s)"
  fi
  echo "gpu_run rc=$rc"
  return $rc
}
run 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
