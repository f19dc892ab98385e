"""Expert-parallel moe_step (issue 13) on ONE GPU: correctness and sanitizers with 1 rank and
with 2 ranks as two processes sharing the GPU (the same kernel path as 2 GPUs: the count
exchange, rows and READY through peer mappings, combine reading the owner's ys; but no speed:
the two processes' persistent kernels are time-sliced). Speed needs a multi-GPU machine.

    python3 benchmarks/moe_ep_check.py check [T ...]          # world 1 and 2, 4 launches per rank
    python3 benchmarks/moe_ep_check.py sanitize [TOOL] [T] [WORLD]   # compute-sanitizer on every rank
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tools")]
BIN = Path(os.environ.get("PIPELINK_MOE_STEP_DIR") or ROOT / "bazel-bin" / "kernels")

from cp_worker import run_ranks  # noqa: E402


def _summary(res):
    return [{k: r[k] for k in ("rank", "errors", "max_err", "vs_single", "ok_frac", "launches") if k in r} for r in res]


def check(*Ts: int) -> int:
    bad = 0
    for world in (1, 2):
        for T in Ts or (16, 300, 2048):
            t0 = time.time()
            try:
                res = run_ranks("moe", world, uuid.uuid4().hex, T, 4321, BIN)
                s = _summary(res)
                ok = all(not r["errors"] and max(r["max_err"]) < 2e-2 and max(r["vs_single"]) < 2e-2 for r in res)
            except AssertionError as e:
                s, ok = str(e)[-3000:], False
            bad += not ok
            print(json.dumps({"world": world, "T": T, "ok": ok, "s": round(time.time() - t0, 1), "ranks": s}),
                  flush=True)
    return 1 if bad else 0


def sanitize(tool: str = "memcheck", T: int = 16, *worlds: int) -> int:
    prefix = ["compute-sanitizer", "--tool", tool, "--error-exitcode", "7", "--report-api-errors", "no"]
    bad = 0
    for world in worlds or (1, 2):
        t0 = time.time()
        try:
            res = run_ranks("moe", world, uuid.uuid4().hex, int(T), 77, BIN, prefix=prefix)
            errs = [r["errors"] for r in res]
            summaries = [ln for r in res for ln in r["log"].splitlines() if "ERROR SUMMARY" in ln]
            ok = not any(errs) and all(" 0 errors" in ln for ln in summaries)
        except AssertionError as e:
            ok, errs, summaries = False, str(e)[-3000:], []
        bad += not ok
        print(json.dumps({"tool": tool, "world": world, "T": int(T), "ok": ok, "s": round(time.time() - t0, 1),
                          "summary": summaries, "errors": errs}), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    cmd, *args = sys.argv[1:] or ["check"]
    if cmd == "check":
        sys.exit(check(*map(int, args)))
    if cmd == "sanitize":
        sys.exit(sanitize(*args[:1], *map(int, args[1:])))
    sys.exit(f"unknown command {cmd!r}: check | sanitize")
