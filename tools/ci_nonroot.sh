#!/usr/bin/env bash
# tools/ci_nonroot.sh — CI: run the Bazel tests once more as an ordinary user, through
# tools/bazel's user namespace (no root, no mounts left in the host's namespace).
#
#   bash tools/ci_nonroot.sh        # as root, after tools/setup.sh
#   PIPELINK_CI_NONROOT_TARGETS=//... bash tools/ci_nonroot.sh   # every test, not the sample
#
# The default is a sample that exercises every kind of action from a cold output root: the
# toolchain smoke test, the rules' analysis tests, compile / pack / link / control / SASS
# test for the toy, causal attention and the CuTe GEMM, and moe_step (host providers, CUTLASS
# components) built (its SASS test is manual, as in //...). tools/test.sh already ran all of
# //... as root; a cold //... here would add about 7 minutes to CI.
#
# Creates the user $PIPELINK_CI_USER (default pipelink-ci) if needed, gives it a copy of this
# checkout's files and of the venv in its home, and runs tools/bazel test there with its
# own Bazel output root (~/.cache/pipelink/bazel) and the shared, read-only Bazel root.
set -euo pipefail
WS="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd -P)"
user="${PIPELINK_CI_USER:-pipelink-ci}"
T0=$SECONDS
[[ "$(id -u)" == 0 ]] || { echo "ci_nonroot: run as root (it creates the user $user)" >&2; exit 2; }
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
home="$(getent passwd "$user" | cut -d: -f6)"
dest="$home/pipelink"
as_user() { runuser -u "$user" -- env -i HOME="$home" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 CI="${CI:-}" "$@"; }

# A previous run's Bazel server, then a fresh copy of the checkout.
[[ -x "$dest/tools/bazel" ]] && (cd "$dest" && as_user tools/bazel shutdown >/dev/null 2>&1) || true
rm -rf "$dest"
mkdir -p "$dest"
(cd "$WS" && git ls-files -co --exclude-standard -z | grep -zv '^\.venv' | tar --null -T - -cf -) | tar -xf - -C "$dest"

# The venv: a copy when the user can run its Python, else a new one from the system python3.
py_real="$(readlink -f "$WS/.venv/bin/python")"
if runuser -u "$user" -- "$py_real" -c 'import sys' >/dev/null 2>&1; then
  cp -a "$(readlink -f "$WS/.venv")" "$dest/.venv"
else
  sys_py="$(readlink -f /usr/bin/python3)"   # the real path: /usr/bin/python3 is sid's inside the root
  echo "ci_nonroot: $user cannot run $py_real; making a venv from $sys_py"
  "$sys_py" -m venv "$dest/.venv"
  "$dest/.venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps -r "$WS/requirements.lock"
  cu13="$("$dest/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia/cu13"
  [[ -e "$cu13/lib64" ]] || ln -s lib "$cu13/lib64"
fi
chown -R "$user:" "$dest"

mounts_before="$(findmnt -rn -o TARGET | sort)"
rc=0
read -r -a targets <<< "${PIPELINK_CI_NONROOT_TARGETS:-//examples/... //tests/... //kernels:moe_step //kernels/attention:attn_causal_sass_test //kernels:gemm_swiglu_tma_cute_sass_test}"
(cd "$dest" && as_user tools/bazel test "${targets[@]}") || rc=$?
(cd "$dest" && as_user tools/bazel shutdown) || true
mounts_after="$(findmnt -rn -o TARGET | sort)"
if [[ "$mounts_before" != "$mounts_after" ]]; then
  echo "ci_nonroot: FAILED: mounts appeared in the host's namespace:" >&2
  diff <(echo "$mounts_before") <(echo "$mounts_after") >&2 || true
  rc=1
fi
echo "== non-root bazel test ${targets[*]} (user $user) done in $((SECONDS - T0))s: exit $rc"
exit $rc
