#!/bin/sh
# Runs nvcc so that its output does not depend on where the action runs.
#
# Usage: nvcc_wrapper.sh KEY SRC OUT NVCC [nvcc args...]   (paths relative to the exec root)
#
# nvcc hashes the absolute, symlink-resolved path of the source file (and the working
# directory) into the module id and the encrypted LTO-IR, so the same compile in two
# output bases (or two sandbox slots) gives different bytes. This wrapper runs nvcc from a
# fixed directory /tmp/pipelink-nvcc/KEY that mirrors the exec root with symlinks, except
# for SRC, which is a real copy there: every path nvcc sees is then the same in every build.
# KEY is derived from OUT by the rule; a lock serializes two builds that compile the same
# output at the same time.
set -eu
key="$1"; src="$2"; out="$3"; nvcc="$4"; shift 4
exec_root="$(pwd -P)"
top="/tmp/pipelink-nvcc"
mkdir -p "$top"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$top/$key.lock"
  flock 9
fi
D="$top/$key"
rm -rf "$D"
mkdir -p "$D"

link_entries() { # $1: a directory relative to the exec root, "" or ending in "/"
  for e in "$exec_root/$1"* "$exec_root/$1".[!.]*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    ln -s "$e" "$D/$1${e##*/}"
  done
}

link_entries ""
case "$src" in */*) dir="${src%/*}" ;; *) dir="" ;; esac
rel=""
# Split $dir at "/" by hand: an unquoted `for part in $dir` also glob-expanded each part, so a
# directory named `b*` became `bazel-out`, and the `rm -f "$D/$src"` below then went through
# the symlink to the real directory and deleted the source itself.
rest="$dir/"
while [ -n "$dir" ] && [ -n "$rest" ]; do
  part="${rest%%/*}"
  rest="${rest#*/}"
  rel="$rel$part/"
  rm -f "$D/${rel%/}"
  mkdir -p "$D/$rel"
  link_entries "$rel"
done
rm -f "$D/$src"
cp "$exec_root/$src" "$D/$src"

rc=0
(cd "$D" && "$nvcc" "$@") 2> "$D.log" || rc=$?
cat "$D.log" >&2
if [ "$rc" != 0 ]; then
  # A failed compile gets a code and a hint under nvcc's own errors (B-COMPILE, errors.bzl).
  missing="$(sed -n 's/.*fatal error: \([^:]*\): No such file or directory.*/\1/p' "$D.log" | head -n 1)"
  if [ -n "$missing" ]; then
    hint="list $missing in the component's hdrs (or a dep's); the action sees only declared headers (CUTLASS/CuTe: cutlass = True)"
  elif grep -q "static assertion failed\|static_assert" "$D.log"; then
    hint="the source refuses this build's defines or copts (its static_assert above): use a variant it supports"
  else
    hint="fix the source at the first error above; the command is nvcc $*"
  fi
  echo "pipelink B-COMPILE: $src: nvcc failed (exit $rc); its errors are above. hint: $hint" >&2
fi
rm -f "$D.log"
# An output whose directory was mirrored (a generated SRC beside it) landed in $D: move it.
if [ "$rc" = 0 ] && [ -e "$D/$out" ] && ! [ "$D/$out" -ef "$exec_root/$out" ]; then
  mv -f "$D/$out" "$exec_root/$out"
fi
rm -rf "$D"
exit "$rc"
