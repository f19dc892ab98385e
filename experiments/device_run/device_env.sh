# Sourced by the device-run scripts: carried wheels (.whl, e.g. liger-kernel) into /tmp/site,
# tools/ on PYTHONPATH, unbuffered output, one line of what the GPU is doing now, and the
# scripts' two helpers, `has` and `step` (below).
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/tools${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader

# has NAME: NAME is one of the script's $STEPS
has() { [[ " $STEPS " == *" $1 "* ]]; }
# step NAME SECONDS CMD...: run CMD under a limit into $OUT/NAME.log, print its tail ($TAIL lines),
# set rc=1 on a failure (a hung persistent kernel costs its step, not the whole device call)
step() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local r=$?
  [[ $r -eq 124 ]] && echo "!! $name: killed after ${limit}s (hang?)"
  [[ $r -ne 0 ]] && rc=1
  echo "== $name: exit $r in $((SECONDS - t0))s"; tail -n "${TAIL:-4}" "$OUT/$name.log"
}
