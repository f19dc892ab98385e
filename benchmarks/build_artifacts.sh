#!/usr/bin/env bash
# Builds, on this (CPU) machine, everything the GPU run loads: for several configurations of
# the toy and (when kernels/gemm_swiglu/ has its sources) of the GEMM + SwiGLU kernel, the
# linked cubin, the control cubin (same sources as ONE translation unit), the manifest, the
# report and the placement map, plus an index.json that benchmarks/gpu_bench.py reads.
# The GPU machine has no z3, so nothing is linked there: carry the folder (run: carry
# [".devbuild"]) and point benchmarks/gpu_run.sh at it.
#
# Usage (repo root):  benchmarks/build_artifacts.sh [OUTDIR=.devbuild] [--toy-only]
# Env: CUDA_HOME (default: the venv's nvidia/cu13), PYTHON (default: .venv/bin/python).
#
# Configurations: a ring depth is pinned by rewriting the depth range in temporary copies of
# the producer and consumer contracts ("free" = the solver's choice); a gemm tile by
# -DMAINLOOP_BLOCK_{M,N,K} on mainloop.cu (mainloop_wgmma.cu) plus its contract's `own` values;
# gemm_swiglu_wgmma links swiglu.cu built with -DSWIGLU_LAYOUT_WGMMA; the toy tile by
# -DTOY_TILE on consumer.cu plus its `own`. A configuration that does not link (e.g. L-REGS)
# is reported and skipped; the script fails only if none links.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUTDIR=.devbuild
TOY_ONLY=0
for a in "$@"; do
  case $a in
    --toy-only) TOY_ONLY=1 ;;
    -*) echo "unknown option $a" >&2; exit 2 ;;
    *) OUTDIR=$a ;;
  esac
done
CU=${CUDA_HOME:-$ROOT/.venv/lib/python3.11/site-packages/nvidia/cu13}
NVCC=$CU/bin/nvcc
PY=${PYTHON:-$ROOT/.venv/bin/python}
export PYTHONPATH=$ROOT/tools${PYTHONPATH:+:$PYTHONPATH}
PL="$PY -m pipelink"
INC=-I$ROOT/tools/pipelink/include
GEN=-gencode=arch=compute_90a,code=lto_90a
WORK=$(mktemp -d /tmp/pl-artifacts.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
[ -x "$NVCC" ] || { echo "no nvcc at $NVCC (set CUDA_HOME)" >&2; exit 1; }

# Keep the output folder out of git (it is carried to the GPU machine, never committed).
if [ -d .git ] && ! grep -qxF "/$OUTDIR/" .git/info/exclude 2>/dev/null; then
  mkdir -p .git/info && echo "/$OUTDIR/" >> .git/info/exclude
fi
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"
ENTRIES=$WORK/entries.jsonl
: > "$ENTRIES"
ok=0
fail=0

# pin_contract SRC DST DEPTH [fact=value ...]: copy a contract, pinning the ring depth
# range (DEPTH "free" keeps it) and setting owned facts' `own` values.
pin_contract() {
  local src=$1 dst=$2 depth=$3; shift 3
  "$PY" - "$src" "$dst" "$depth" "$@" <<'EOF'
import re, sys
src, dst, depth, *owns = sys.argv[1:]
text = open(src).read()
if depth != "free":
    text, n = re.subn(r"(?m)^(depth\s*=\s*)\[[^\]]*\]", rf"\g<1>[{depth}, {depth}]", text)
    assert n, f"no depth range in {src}"
for kv in owns:
    name, value = kv.split("=")
    pat = rf"(?ms)(^\[fact\.{name}\]\s*$.*?^own\s*=\s*)\S+"
    text, n = re.subn(pat, rf"\g<1>{value}", text, count=1)
    assert n, f"no own value for fact {name} in {src}"
open(dst, "w").write(text)
EOF
}

# link_config KERNEL NAME KERNEL_TOML JSON_CONFIG PKG...: link + control into OUTDIR/KERNEL/NAME
link_config() {
  local kernel=$1 name=$2 ktoml=$3 config=$4; shift 4
  local dir=$OUTDIR/$kernel/$name
  local pk=()
  for p in "$@"; do pk+=(--package "$p"); done
  if $PL link --kernel "$ktoml" "${pk[@]}" --out-dir "$dir" --control-cubin "$dir/$kernel.control.cubin" \
       > "$WORK/link.log" 2>&1; then
    local depth
    depth=$("$PY" -c "import json,sys; r=json.load(open(sys.argv[1]))['rings']; print(json.dumps({k: v['depth'] for k, v in r.items()}))" "$dir/$kernel.report.json")
    echo "{\"name\": \"$kernel/$name\", \"kernel\": \"$kernel\", \"dir\": \"$kernel/$name\", \"linked\": \"$kernel.cubin\", \"control\": \"$kernel.control.cubin\", \"manifest\": \"$kernel.manifest.json\", \"config\": $config, \"depths\": $depth}" >> "$ENTRIES"
    echo "  linked $kernel/$name: $(head -1 "$dir/$kernel.map.txt")"
    ok=$((ok + 1))
  else
    echo "  SKIPPED $kernel/$name: link failed:"; sed 's/^/    /' "$WORK/link.log" | head -20
    rm -rf "$dir"
    fail=$((fail + 1))
  fi
}

# ---- toy ---------------------------------------------------------------------------------
echo "== toy"
T=examples/toy
for tile in 256 1024; do
  o=$WORK/toy_t$tile
  mkdir -p "$o"
  for c in producer consumer sink; do
    "$NVCC" -dc -std=c++17 -O3 $GEN $INC -DTOY_TILE=$tile "$T/$c.cu" -o "$o/$c.o" || exit 1
  done
  for depth in 2 4 free; do
    d=$o/d$depth
    mkdir -p "$d"
    pin_contract $T/producer.contract.toml "$d/producer.contract.toml" $depth
    pin_contract $T/consumer.contract.toml "$d/consumer.contract.toml" $depth tile=$tile
    cp $T/sink.contract.toml "$d/"
    for c in producer consumer sink; do
      $PL pack --contract "$d/$c.contract.toml" --object "$o/$c.o" --source $T/$c.cu --source $T/params.h \
        --copt=-DTOY_TILE=$tile --out "$d/$c.plpkg" > /dev/null || exit 1
    done
    link_config toy t${tile}_d$depth $T/toy.kernel.toml "{\"tile\": $tile, \"depth\": \"$depth\"}" \
      "$d/producer.plpkg" "$d/consumer.plpkg" "$d/sink.plpkg"
  done
done

# ---- gemm_swiglu ---------------------------------------------------------------------------
G=kernels/gemm_swiglu
if [ $TOY_ONLY = 0 ] && [ -f $G/loader.cu ] && [ -f $G/mainloop.cu ] && [ -f $G/swiglu.cu ]; then
  echo "== gemm_swiglu"
  KT=$G/gemm_swiglu.kernel.toml
  if [ ! -f "$KT" ]; then  # until the kernel's owner commits one
    KT=$WORK/gemm_swiglu.kernel.toml
    cat > "$KT" <<'EOF'
[kernel]
name = "gemm_swiglu"
arch = "sm_90a"
grid = ["n / block_n", "m / block_m", 1]

[[instance]]
name = "load"
package = "loader"

[[instance]]
name = "mma"
package = "mainloop"

[[instance]]
name = "epi"
package = "swiglu"
EOF
  fi
  HDRS=()
  for h in $G/*.h; do HDRS+=(--source "$h"); done
  o=$WORK/gsw
  mkdir -p "$o"
  for c in loader swiglu; do
    "$NVCC" -dc -std=c++17 -O3 $GEN $INC "$G/$c.cu" -o "$o/$c.o" || exit 1
  done
  for tile in "128 64 64" "128 128 64" "64 64 64" "128 64 32"; do
    set -- $tile
    bm=$1 bn=$2 bk=$3
    t=${bm}x${bn}x${bk}
    copt="-DMAINLOOP_BLOCK_M=$bm -DMAINLOOP_BLOCK_N=$bn -DMAINLOOP_BLOCK_K=$bk"
    "$NVCC" -dc -std=c++17 -O3 $GEN $INC $copt "$G/mainloop.cu" -o "$o/mainloop_$t.o" || exit 1
    for depth in 2 4 free; do
      d=$o/${t}_d$depth
      mkdir -p "$d"
      pin_contract $G/loader.contract.toml "$d/loader.contract.toml" $depth
      pin_contract $G/mainloop.contract.toml "$d/mainloop.contract.toml" $depth block_m=$bm block_n=$bn block_k=$bk
      cp $G/swiglu.contract.toml "$d/"
      $PL pack --contract "$d/loader.contract.toml" --object "$o/loader.o" --source $G/loader.cu "${HDRS[@]}" \
        --out "$d/loader.plpkg" > /dev/null || exit 1
      $PL pack --contract "$d/mainloop.contract.toml" --object "$o/mainloop_$t.o" --source $G/mainloop.cu "${HDRS[@]}" \
        --copt=-DMAINLOOP_BLOCK_M=$bm --copt=-DMAINLOOP_BLOCK_N=$bn --copt=-DMAINLOOP_BLOCK_K=$bk \
        --out "$d/mainloop.plpkg" > /dev/null || exit 1
      $PL pack --contract "$d/swiglu.contract.toml" --object "$o/swiglu.o" --source $G/swiglu.cu "${HDRS[@]}" \
        --out "$d/swiglu.plpkg" > /dev/null || exit 1
      link_config gemm_swiglu ${t}_d$depth "$KT" \
        "{\"block_m\": $bm, \"block_n\": $bn, \"block_k\": $bk, \"depth\": \"$depth\"}" \
        "$d/loader.plpkg" "$d/mainloop.plpkg" "$d/swiglu.plpkg"
    done
  done
else
  echo "== gemm_swiglu: skipped ($([ $TOY_ONLY = 1 ] && echo --toy-only || echo "no sources in $G"))"
fi

# ---- gemm_swiglu_wgmma: the same loader, the wgmma consumer, swiglu in the wgmma layout ------
if [ $TOY_ONLY = 0 ] && [ -f $G/mainloop_wgmma.cu ] && [ -f $G/gemm_swiglu_wgmma.kernel.toml ]; then
  echo "== gemm_swiglu_wgmma"
  KT=$G/gemm_swiglu_wgmma.kernel.toml
  HDRS=()
  for h in $G/*.h; do HDRS+=(--source "$h"); done
  o=$WORK/gsw_wgmma
  mkdir -p "$o"
  "$NVCC" -dc -std=c++17 -O3 $GEN $INC "$G/loader.cu" -o "$o/loader.o" || exit 1
  "$NVCC" -dc -std=c++17 -O3 $GEN $INC -DSWIGLU_LAYOUT_WGMMA "$G/swiglu.cu" -o "$o/swiglu.o" || exit 1
  for tile in "128 64 64" "128 128 64"; do  # mainloop_wgmma: block_m = 128, block_k = 64
    set -- $tile
    bm=$1 bn=$2 bk=$3
    t=${bm}x${bn}x${bk}
    copt="-DMAINLOOP_BLOCK_M=$bm -DMAINLOOP_BLOCK_N=$bn -DMAINLOOP_BLOCK_K=$bk"
    "$NVCC" -dc -std=c++17 -O3 $GEN $INC $copt "$G/mainloop_wgmma.cu" -o "$o/mainloop_wgmma_$t.o" || exit 1
    for depth in 2 4 free; do
      d=$o/${t}_d$depth
      mkdir -p "$d"
      pin_contract $G/loader.contract.toml "$d/loader.contract.toml" $depth
      pin_contract $G/mainloop_wgmma.contract.toml "$d/mainloop_wgmma.contract.toml" $depth block_m=$bm block_n=$bn block_k=$bk
      cp $G/swiglu_wgmma.contract.toml "$d/"
      $PL pack --contract "$d/loader.contract.toml" --object "$o/loader.o" --source $G/loader.cu "${HDRS[@]}" \
        --out "$d/loader.plpkg" > /dev/null || exit 1
      $PL pack --contract "$d/mainloop_wgmma.contract.toml" --object "$o/mainloop_wgmma_$t.o" \
        --source $G/mainloop_wgmma.cu "${HDRS[@]}" \
        --copt=-DMAINLOOP_BLOCK_M=$bm --copt=-DMAINLOOP_BLOCK_N=$bn --copt=-DMAINLOOP_BLOCK_K=$bk \
        --out "$d/mainloop_wgmma.plpkg" > /dev/null || exit 1
      $PL pack --contract "$d/swiglu_wgmma.contract.toml" --object "$o/swiglu.o" --source $G/swiglu.cu "${HDRS[@]}" \
        --copt=-DSWIGLU_LAYOUT_WGMMA --out "$d/swiglu.plpkg" > /dev/null || exit 1
      link_config gemm_swiglu_wgmma ${t}_d$depth "$KT" \
        "{\"block_m\": $bm, \"block_n\": $bn, \"block_k\": $bk, \"depth\": \"$depth\"}" \
        "$d/loader.plpkg" "$d/mainloop_wgmma.plpkg" "$d/swiglu.plpkg"
    done
  done
else
  echo "== gemm_swiglu_wgmma: skipped ($([ $TOY_ONLY = 1 ] && echo --toy-only || echo "no mainloop_wgmma sources in $G"))"
fi

"$PY" - "$ENTRIES" "$OUTDIR/index.json" <<'EOF'
import json, subprocess, sys
entries = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
try:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
except OSError:
    commit = ""
json.dump({"format": 1, "commit": commit, "configs": entries}, open(sys.argv[2], "w"), indent=1)
EOF
echo "== $ok configuration(s) linked, $fail skipped -> $OUTDIR ($(du -sh "$OUTDIR" | cut -f1))"
[ $ok -gt 0 ]
