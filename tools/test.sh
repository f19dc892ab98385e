#!/usr/bin/env bash
# tools/test.sh — run every test: build //... (the tests read bazel-bin), pytest over tests/ with the repo's venv, then `bazel test //...`.
# Exits nonzero if either fails. CI=true machines have no GPU: tests that need one skip.
# Run bash tools/setup.sh first.
set -uo pipefail
WS="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd -P)"
cd "$WS"
VENV="$WS/.venv"
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "test: no $VENV. Fix: bash tools/setup.sh" >&2
  exit 2
fi
rc=0
T0=$SECONDS

# The tests read bazel-bin. Bazel's output root outlives a clone (a fresh clone at the same
# path gets the old bazel-bin), so build every target first: a test never reads a stale output.
echo "== bazel build //... --output_groups=+control"
"$WS/tools/bazel" build //... --output_groups=+control
if [[ $? -ne 0 ]]; then
  echo "test: bazel build FAILED; the tests would read stale or missing outputs" >&2
  "$WS/tools/bazel" shutdown >/dev/null 2>&1 || true
  exit 1
fi

echo "== pytest tests/"
"$VENV/bin/python" -m pytest tests/ -q -rs -p no:cacheprovider
prc=$?
# 5 = no tests were collected: not a failure of the suite (the Bazel tests still run).
if [[ $prc -ne 0 && $prc -ne 5 ]]; then
  echo "test: pytest FAILED (exit $prc)" >&2
  rc=1
fi

echo "== bazel test //..."
"$WS/tools/bazel" test //... 
brc=$?
if [[ $brc -ne 0 ]]; then
  echo "test: bazel test FAILED (exit $brc)" >&2
  rc=1
fi
"$WS/tools/bazel" shutdown >/dev/null 2>&1 || true

echo "== tests done in $((SECONDS - T0))s: pytest exit $prc, bazel exit $brc"
exit $rc
