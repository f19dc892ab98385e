#!/usr/bin/env bash
# tools/setup.sh — set up pipelink on a fresh Debian machine, then build the main example.
#
#   bash tools/setup.sh
#
# Idempotent: a second run only checks (seconds). Steps:
#   1. .venv in the repo root with the exact pins of requirements.lock (CUDA 13.0 toolkit
#      wheels, CUTLASS headers, z3, cuda-bindings, test tools) + `pip install -e .`
#      (the `pipelink` command);
#   2. Bazel >= 7.1: the host's if it has one, else Debian sid's Bazel 7.7.1 (with g++-14
#      for nvcc) in a private root made with mmdebstrap at $PIPELINK_HOME/sidroot
#      (default /opt/pipelink/sidroot), entered by tools/bazel;
#   3. `tools/bazel build <main target>`.
# Environment: PIPELINK_HOME (default /opt/pipelink), PIPELINK_SIDROOT, PYTHON (the python3
# that makes the venv, default python3), PIPELINK_SKIP_BUILD=1 (skip step 3).
set -euo pipefail

# The main example the set-up builds last: GEMM + SwiGLU from three separately packed owners.
MAIN_TARGET="//kernels:moe_step"

WS="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd -P)"
cd "$WS"
# Where the Bazel root lives: the same rule as tools/bazel's (root: /opt/pipelink/sidroot; an
# ordinary user: that one if it is ready, else ~/.local/share/pipelink/sidroot).
SIDROOT="$(bash "$WS/tools/bazel" --pipelink-paths | sed -n 's/^SIDROOT=//p')"
SID_PACKAGES="bazel-bootstrap,python3,g++-14"   # changing this rebuilds the root
SID_MIRROR="${PIPELINK_SID_MIRROR:-http://deb.debian.org/debian}"
PYTHON="${PYTHON:-python3}"
VENV="$WS/.venv"
T0=$SECONDS

STEP="" FIX=""
step() { STEP="$1"; FIX="$2"; printf '\n== %s\n' "$1"; }
fail() { # message, fix
  printf '\nsetup: FAILED: %s\n  what went wrong: %s\n  how to fix: %s\n' "$STEP" "$1" "$2" >&2
  STEP=""
  exit 1
}
trap 'rc=$?; [[ $rc -ne 0 && -n "$STEP" ]] && printf "\nsetup: FAILED (exit %s) during: %s\n  how to fix: %s\n" "$rc" "$STEP" "$FIX" >&2' EXIT
done_in() { printf '   ok (%ds)\n' "$((SECONDS - $1))"; }

# --- 1. Python environment ----------------------------------------------------------------
t=$SECONDS
step "Python virtual environment (.venv)" \
  "install Python >= 3.11 with venv support (Debian: apt-get install python3-venv), or set PYTHON=/path/to/python3.11+; a broken .venv can be removed: rm -rf .venv"
if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
  echo "   reusing $VENV ($("$VENV/bin/python" -V 2>&1))"
else
  [[ -e "$VENV" ]] && fail "$VENV exists but its python does not run or is older than 3.11" "rm -rf $VENV && bash tools/setup.sh"
  command -v "$PYTHON" >/dev/null || fail "no '$PYTHON' on PATH" "apt-get install python3 python3-venv (Python >= 3.11), or set PYTHON="
  "$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null \
    || fail "$PYTHON is $("$PYTHON" -V 2>&1); pipelink needs >= 3.11" "set PYTHON=/path/to/python3.11+"
  # Made from the interpreter's real path (/usr/bin/python3.11, not /usr/bin/python3): inside
  # the Bazel root /usr/bin/python3 is sid's Python, and the venv's link must not resolve to it.
  PYTHON="$(readlink -f "$(command -v "$PYTHON")")"
  if ! "$PYTHON" -m venv "$VENV" 2>/tmp/pipelink-venv.err; then
    rm -rf "$VENV"
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null && grep -q ensurepip /tmp/pipelink-venv.err; then
      echo "   python3-venv missing: installing it with apt-get"
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null \
        || fail "apt-get install python3-venv failed" "apt-get update && apt-get install python3-venv"
      "$PYTHON" -m venv "$VENV" || fail "python3 -m venv failed again" "see the error above"
    else
      cat /tmp/pipelink-venv.err >&2
      fail "$PYTHON -m venv failed" "apt-get install python3-venv (or the venv module of your Python)"
    fi
  fi
fi
done_in $t

t=$SECONDS
step "pinned requirements (requirements.lock)" \
  "check network access to PyPI (pip config list), then rerun; to start over: rm -rf .venv && bash tools/setup.sh"
lock_sum="$(sha256sum requirements.lock | cut -d' ' -f1)"
stamp="$VENV/.pipelink-requirements.sha256"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$lock_sum" ]]; then
  echo "   up to date (requirements.lock unchanged since the last install)"
else
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-deps -r requirements.lock \
    || fail "pip install -r requirements.lock failed" "read pip's error above; a pin that no longer exists must be changed in requirements.lock"
  "$VENV/bin/python" -m pip check --disable-pip-version-check \
    || fail "pip check: the lock misses a dependency or two pins disagree" "add the missing package with an exact pin to requirements.lock"
  echo "$lock_sum" > "$stamp"
fi
done_in $t

t=$SECONDS
step "pipelink package (pip install -e .)" \
  "read pip's error above; pyproject.toml must build with setuptools from requirements.lock"
proj_sum="$(sha256sum pyproject.toml | cut -d' ' -f1)"
pstamp="$VENV/.pipelink-editable.sha256"
if [[ -f "$pstamp" && "$(cat "$pstamp")" == "$proj_sum" && -x "$VENV/bin/pipelink" ]]; then
  echo "   up to date"
else
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e . \
    || fail "editable install of the repo failed" "see pip's error above"
  echo "$proj_sum" > "$pstamp"
fi
ln -sfn "$WS/tools/bazel" "$VENV/bin/bazel"   # `bazel` for an activated venv
done_in $t

t=$SECONDS
step "CUDA toolkit from the wheels" \
  "rm -rf .venv && bash tools/setup.sh (reinstalls the nvidia-* wheels)"
CU13="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia/cu13"
[[ -x "$CU13/bin/nvcc" ]] || fail "no nvcc at $CU13/bin/nvcc" "$FIX"
# nvcc.profile looks for libraries in lib64; the wheels use lib ("cannot find -lcudadevrt").
[[ -e "$CU13/lib64" ]] || ln -s lib "$CU13/lib64"
# nvcc & co. on PATH for an activated venv (`. .venv/bin/activate`), as README's no-Bazel
# commands expect. Wrappers, not symlinks: nvcc finds nvcc.profile (and so its headers) from
# the path it was started by, which a symlink would change.
for tool in nvcc ptxas cuobjdump nvdisasm nvlink fatbinary; do
  [[ -x "$CU13/bin/$tool" ]] || continue
  printf '#!/bin/sh\n# made by tools/setup.sh: the CUDA wheel'"'"'s %s\nexec "%s" "$@"\n' "$tool" "$CU13/bin/$tool" > "$VENV/bin/$tool"
  chmod +x "$VENV/bin/$tool"
done
echo "   nvcc, ptxas, cuobjdump, nvdisasm on PATH with the venv activated ($VENV/bin)"
"$CU13/bin/nvcc" --version | tail -2 | head -1 | sed 's/^/   /'
"$VENV/bin/python" -c 'import z3, cuda.bindings.nvjitlink as n; print("   z3", z3.get_version_string(), "| nvJitLink", "%d.%d" % n.version())' \
  || fail "z3 or cuda.bindings.nvjitlink does not import" "$FIX"
done_in $t

t=$SECONDS
step "BuildGrid for the remote-cache test (requirements-remote.lock)" \
  "check network access to PyPI, then rerun; to start over: rm -rf .pipelink/buildgrid-py3.14 && bash tools/setup.sh"
# buildgrid 0.9.1 needs Python >= 3.13: wheels for CPython 3.14 (Debian sid's python3 in the
# Bazel root runs it); binary wheels only, so nothing is built here. pip checks Requires-Python
# against the interpreter running pip, not --python-version, hence --ignore-requires-python.
BG_DIR="$WS/.pipelink/buildgrid-py3.14"
bg_sum="$(sha256sum requirements-remote.lock | cut -d' ' -f1)"
if [[ -f "$BG_DIR/.pipelink-requirements.sha256" && "$(cat "$BG_DIR/.pipelink-requirements.sha256")" == "$bg_sum" ]]; then
  echo "   up to date"
else
  rm -rf "$BG_DIR"
  plat=()
  arch="$(uname -m)"
  for p in manylinux_2_34 manylinux_2_28 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1; do
    plat+=(--platform "${p}_$arch")
  done
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-deps --only-binary=:all: \
      --python-version 3.14 --implementation cp --abi cp314 --abi abi3 --abi none "${plat[@]}" \
      --ignore-requires-python \
      --target "$BG_DIR" -r requirements-remote.lock \
    || fail "pip could not install requirements-remote.lock for CPython 3.14" "read pip's error above"
  echo "$bg_sum" > "$BG_DIR/.pipelink-requirements.sha256"
fi
done_in $t

# --- 2. Bazel ---------------------------------------------------------------------------------
t=$SECONDS
step "Bazel >= 7.1" \
  "see the error above; the root can be rebuilt with: rm -rf $SIDROOT && bash tools/setup.sh"
host_bazel=""
for cand in $(type -ap bazel 2>/dev/null || true); do
  [[ "$(readlink -f "$cand")" == "$WS/tools/bazel" ]] && continue
  v="$("$cand" --version 2>/dev/null | awk '/^bazel /{print $2; exit}')" || true
  if [[ "$v" =~ ^([0-9]+)\.([0-9]+) ]] && (( BASH_REMATCH[1] > 7 || (BASH_REMATCH[1] == 7 && BASH_REMATCH[2] >= 1) )); then
    host_bazel="$cand"; echo "   using the host's Bazel $v at $cand"; break
  fi
done
if [[ -z "$host_bazel" ]]; then
  marker="$SIDROOT/.pipelink-root-ready"
  if [[ -f "$marker" && "$(cat "$marker")" == "$SID_PACKAGES" && -x "$SIDROOT/usr/bin/bazel" ]]; then
    echo "   using the Bazel root at $SIDROOT ($("$WS/tools/bazel" --pipelink-exec /usr/bin/bazel --version 2>/dev/null || echo '?'))"
  else
    mode=()
    if ! command -v mmdebstrap >/dev/null; then
      [[ "$(id -u)" == 0 ]] || fail "mmdebstrap is not installed" "as root: apt-get install mmdebstrap uidmap (once), then rerun as this user"
      echo "   installing mmdebstrap (apt-get)"
      { apt-get update -qq && apt-get install -y -qq mmdebstrap >/dev/null; } \
        || fail "apt-get install mmdebstrap failed" "apt-get update && apt-get install mmdebstrap"
    fi
    if [[ "$(id -u)" != 0 ]]; then
      # An ordinary user: mmdebstrap's unshare mode (a user namespace with the subordinate ids
      # of /etc/subuid and /etc/subgid, newuidmap from the uidmap package).
      mode=(--mode=unshare)
      grep -q "^$(id -un):" /etc/subuid 2>/dev/null \
        || fail "$(id -un) has no subordinate uid range for mmdebstrap --mode=unshare" "as root: usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $(id -un); apt-get install uidmap"
    fi
    echo "   building Debian sid root with $SID_PACKAGES at $SIDROOT (about a minute, 1.5 GB)"
    rm -rf --one-file-system "$SIDROOT.tmp"
    mkdir -p "$(dirname "$SIDROOT")"
    # The sid archive served here is a frozen snapshot, hence Check-Valid-Until false.
    mmdebstrap --quiet "${mode[@]}" --aptopt='Acquire::Check-Valid-Until "false"' --variant=apt \
      --include="$SID_PACKAGES" sid "$SIDROOT.tmp" "$SID_MIRROR" \
      || fail "mmdebstrap could not build the sid root" \
              "check that $SID_MIRROR is reachable over http (apt-get update works), then rerun"
    [[ -x "$SIDROOT.tmp/usr/bin/bazel" && -x "$SIDROOT.tmp/usr/bin/g++-14" ]] \
      || fail "the new root has no /usr/bin/bazel or /usr/bin/g++-14" "Debian sid must ship bazel-bootstrap and g++-14; check the mirror"
    echo "$SID_PACKAGES" > "$SIDROOT.tmp/.pipelink-root-ready"
    if [[ -e "$SIDROOT" ]]; then   # an old root: drop bind mounts an older tools/bazel left
      [[ "$(id -u)" == 0 ]] && { bash "$WS/tools/bazel" --pipelink-unmount || true; }
      rm -rf --one-file-system "$SIDROOT"
    fi
    mv "$SIDROOT.tmp" "$SIDROOT"
  fi
fi
"$WS/tools/bazel" --version >/dev/null 2>&1 || "$WS/tools/bazel" version >/dev/null \
  || fail "tools/bazel does not run" "run tools/bazel version to see why"
done_in $t

# --- 3. build the main example ----------------------------------------------------------------
if [[ "${PIPELINK_SKIP_BUILD:-0}" != 1 ]]; then
  t=$SECONDS
  step "bazel build $MAIN_TARGET" \
    "read Bazel's error above; tools/bazel build $MAIN_TARGET --verbose_failures shows command lines"
  "$WS/tools/bazel" build "$MAIN_TARGET"
  "$WS/tools/bazel" shutdown
  done_in $t
fi

STEP=""
printf '\nsetup: done in %ds. Run Bazel as tools/bazel (e.g. tools/bazel build //...); tests: bash tools/test.sh\n' "$((SECONDS - T0))"
