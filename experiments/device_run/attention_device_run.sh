#!/usr/bin/env bash
# One device-tool call for issue 10's attention variants (d = 128 and the d = 64 builds):
#   check + sanitize + pair + masked variants vs FlexAttention compiled / SDPA (+ ncu), logs in $OUT.
# The tree it runs from holds tools/pipelink, kernels/attention, benchmarks, experiments and the built kernels
# in $PIPELINK_ATTENTION_DIR (default bazel-bin/kernels/attention); optional:
#   V2=dir       an earlier build's cubins (column pipelink_v2)
#   FLEXCACHE=f  a flexcache.tgz an earlier call brought back (warm inductor/triton caches)
#   STEPS="check sanitize pair masks ncu cache"   (default), or add `cx`: the geometry mutations,
#   or `serving` (issue 42: the GQA / any-length / paged GPU tests, then causal and decode at the
#   Llama-3-8B shape, 32 q / 8 kv heads, B = 1 and 4, and the masked variants against Flex)
#   (bazel-bin/experiments/attn_{causal,decode}_mutations*, plain link vs pipelink, watchdog)
set -uo pipefail
cd "$(dirname "$0")/../.."
source experiments/device_run/device_env.sh
OUT=${OUT:-/tmp/attn_out}; mkdir -p "$OUT"
STEPS=${STEPS:-check sanitize pair masks ncu cache}
CACHE=/tmp/flexcache; mkdir -p $CACHE
[ -n "${FLEXCACHE:-}" ] && [ -f "$FLEXCACHE" ] && tar -xzf "$FLEXCACHE" -C $CACHE && echo "flex cache: $(du -sh $CACHE | cut -f1)"
P=(python3 benchmarks/attention_bench.py)
F=(python3 benchmarks/attention_flex_bench.py)
# decode_uniform / decode_streamk: variant decode with each schedule forced (attn_decode, attn_decode_streamk)
D128=full,causal,sliding,block_sparse,document,softcap,alibi,decode_uniform,decode_streamk,decode_paged,prefill_paged
D64=full:64,causal:64,sliding:64,block_sparse:64,document:64,softcap:64,alibi:64,decode_uniform:64,decode_streamk:64,decode_paged:64,prefill_paged:64
rc=0
# flex compiles are CPU work: start them first, in the background, while the GPU checks run
has masks && { "${F[@]}" warm --cache $CACHE --timeout ${WARM_TIMEOUT:-330} > "$OUT/masks.log" 2>&1 & }
WARM=${!:-}  # empty when masks is not a step (set -u)
has check && { "${P[@]}" check --variants $D128,$D64 > "$OUT/check.log" 2>&1 || rc=1; tail -2 "$OUT/check.log"; grep FAIL "$OUT/check.log"; }
has sanitize && { "${P[@]}" sanitize --variants $D128,$D64 --jobs 8 > "$OUT/sanitize.log" 2>&1 || rc=1; tail -1 "$OUT/sanitize.log"; grep -A5 FAIL "$OUT/sanitize.log"; }
has pair && { "${P[@]}" pair --variants $D128,causal:64,block_sparse:64,alibi:64 --rounds ${PAIR_ROUNDS:-10} > "$OUT/pair.log" 2>&1 || rc=1; cat "$OUT/pair.log"; }
if has masks; then
  wait $WARM; cat "$OUT/masks.log"
  "${F[@]}" bench --cache $CACHE --rounds ${ROUNDS:-8} --compile-timeout ${COMPILE_TIMEOUT:-120} --sdpa-causal ${V2:+--v2 $V2} --json "$OUT/masks.json" >> "$OUT/masks.log" 2>&1 || rc=1
  sed -n '/^us per call/,$p' "$OUT/masks.log"; grep -i "timed out\|fail" "$OUT/masks.log"
fi
if has ncu; then
  for v in document block_sparse sliding; do
    timeout ${NCU_TIMEOUT:-60} ncu --clock-control none --section SpeedOfLight --section WarpStateStats -k regex:attn_ --launch-skip 2 \
      --launch-count 1 "${P[@]}" prof --variant $v --seqs 8192 2>&1 | grep -E "attn_|Duration|Throughput|Stall|Warp Cycles|prof:" 
  done > "$OUT/ncu.log"; head -60 "$OUT/ncu.log"
fi
if has serving; then
  timeout ${SERVING_TEST_TIMEOUT:-300} python3 -m pytest -q -rs tests/kernels/test_attention.py \
    -k "grouped or any_kv or any_length or paged or chunked" > "$OUT/serving_tests.log" 2>&1 || rc=1
  tail -3 "$OUT/serving_tests.log"
  for B in 1 4; do
    "${P[@]}" bench --prefill causal --seqs 4096,16384 --batch $B --kv-heads 8 --decode "" --rounds ${ROUNDS:-8} \
      > "$OUT/serving_causal_b$B.log" 2>&1 || rc=1
    sed -n '/^us per call/,$p' "$OUT/serving_causal_b$B.log"
    "${F[@]}" bench --cache $CACHE --seqs 4096,16384 --batch $B --kv-heads 8 --rounds ${ROUNDS:-8} \
      --compile-timeout ${COMPILE_TIMEOUT:-120} > "$OUT/serving_masks_b$B.log" 2>&1 || rc=1
    sed -n '/^us per call/,$p' "$OUT/serving_masks_b$B.log"
  done
  "${P[@]}" bench --prefill "" --kv-heads 8 --paged 16,64 --rounds ${ROUNDS:-8} \
    --decode 1x1024,1x16384,1x131072,8x4096,32x8192,64x1024,64x16384 > "$OUT/serving_decode.log" 2>&1 || rc=1
  sed -n '/^us per call/,$p' "$OUT/serving_decode.log"
fi
if has cx; then
  for k in attn_causal attn_decode; do
    timeout ${CX_TIMEOUT:-240} python3 experiments/symbol_link/symbol_link_counterexample.py --kernel $k --watchdog 5 \
      --json "$OUT/cx_$k.json" > "$OUT/cx_$k.log" 2>&1 || rc=1
    tail -14 "$OUT/cx_$k.log"
  done
fi
has cache && tar -czf "$OUT/flexcache.tgz" -C $CACHE . && ls -la "$OUT/flexcache.tgz"
exit $rc
