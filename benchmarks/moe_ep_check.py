"""Expert-parallel moe_step (issue 13) on ONE GPU: correctness and sanitizers with 1 rank and
with 2 ranks as two processes sharing the GPU (the same kernel path as 2 GPUs: the count
exchange, rows and READY through peer mappings, combine reading the owner's ys; but no speed:
the two processes' persistent kernels are time-sliced). Speed needs a multi-GPU machine.

    python3 benchmarks/moe_ep_check.py check [T ...]          # world 1 and 2, 4 launches per rank
    python3 benchmarks/moe_ep_check.py sanitize [TOOL] [T] [WORLD]   # compute-sanitizer on every rank
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tools")]
BIN = Path(os.environ.get("PIPELINK_MOE_STEP_DIR") or ROOT / "bazel-bin" / "kernels")

from helpers.cp_worker import run_ranks  # noqa: E402
from gpu_bench import COMPUTE_SANITIZER_TOOLS, require_gpu, whole  # noqa: E402


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("check", help="world 1 and 2 against the reference")
    c.add_argument("T", nargs="*", type=whole(1), help="token counts (default 16 300 2048)")
    sz = sub.add_parser("sanitize", help="compute-sanitizer on every rank")
    sz.add_argument("tool", nargs="?", default="memcheck", choices=COMPUTE_SANITIZER_TOOLS)
    sz.add_argument("T", nargs="?", type=whole(1), default=16, help="tokens a rank (default %(default)s)")
    sz.add_argument("world", nargs="*", type=int, choices=[1, 2], help="ranks (default 1 2)")
    a = ap.parse_args(argv)
    cmd = a.cmd or "check"
    if not require_gpu(f"moe_ep_check.py {cmd}"):
        return 1
    if cmd == "sanitize":
        return sanitize(a.tool, a.T, *a.world)
    return check(*(getattr(a, "T", None) or ()))


if __name__ == "__main__":
    sys.exit(main())
