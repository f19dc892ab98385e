#!/usr/bin/env bash
# Builds the hand-linked standalone test for several tile configs into build/gemm_swiglu/
# and compiles each component separately to LTO-IR (what pack consumes).
# Usage: kernels/gemm_swiglu/build_test.sh   (from the repo root; set NVCC or CUDA_HOME to override)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CU=${CUDA_HOME:-$ROOT/.venv/lib/python3.11/site-packages/nvidia/cu13}
NVCC=${NVCC:-$CU/bin/nvcc}
OUTDIR=${OUTDIR:-$ROOT/build/gemm_swiglu}
SRC=$ROOT/kernels/gemm_swiglu
INC="-I$ROOT/tools/pipelink/include"
LIBS=""; [ -d "$CU/lib" ] && [ ! -e "$CU/lib64" ] && LIBS="-L$CU/lib"
mkdir -p "$OUTDIR"
# config name: BM BN BK DEPTH
for cfg in "128 64 32 4" "128 64 64 4" "64 64 64 4" "128 128 64 4" "128 64 64 2" "128 64 32 8"; do
  set -- $cfg
  name="gsw_test_${1}x${2}x${3}_d${4}"
  echo "== $name"
  "$NVCC" -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a $INC $LIBS -Xptxas -v \
    -DMAINLOOP_BLOCK_M=$1 -DMAINLOOP_BLOCK_N=$2 -DMAINLOOP_BLOCK_K=$3 -DTEST_DEPTH=$4 \
    "$SRC/standalone_test.cu" -o "$OUTDIR/$name" 2>&1 | grep -E "registers|spill|stack|warning|error" || true
done
echo "== components -> LTO-IR (nvcc -dc, code=lto_90a)"
for c in loader mainloop swiglu; do
  "$NVCC" -std=c++17 -O3 -dc -gencode arch=compute_90a,code=lto_90a $INC "$SRC/$c.cu" -o "$OUTDIR/$c.o"
done
ls -la "$OUTDIR"
