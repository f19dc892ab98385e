#!/usr/bin/env bash
# Runs on the GPU machine, from the repo root, after build_test.sh and
# `lto_check.py --build-only` built build/gemm_swiglu/ (carry that folder):
# every standalone config on the default shapes, compute-sanitizer (memcheck, racecheck,
# synccheck) on small shapes, and the separately compiled LTO control linked by nvJitLink.
B=build/gemm_swiglu
rc=0
for t in $B/gsw_test_*; do
  echo "=== $t"; $t || rc=1
done
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  for cfg in "gsw_test_128x64x64_d4 256 128 512" "gsw_test_128x64x32_d8 128 64 256"; do
    set -- $cfg
    echo "=== $tool $cfg"
    GSW_ITERS=0 timeout 120 "$SAN" --tool $tool --error-exitcode 9 $B/$1 $2 $3 $4 || { echo "rc=$?"; rc=1; }
  done
done
echo "=== LTO control (separately compiled components, nvJitLink -lto)"
for d in $B/lto_*; do
  IFS=x read bm bn rest <<<"${d##*/lto_}"; bk=${rest%_d*}; depth=${rest#*_d}
  python3 kernels/gemm_swiglu/lto_check.py --objdir $d --bm $bm --bn $bn --bk $bk --depth $depth --run || rc=1
done
echo "device_check rc=$rc"
exit $rc
