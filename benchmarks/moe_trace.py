"""Phase timeline of one moe_step launch (issue 9 diagnostics), from //kernels:moe_step_trace.

    tools/bazel build //kernels:moe_step_trace
    python3 benchmarks/moe_trace.py [--tokens 1,128,4096,16384] [--reps 5]

The trace build is moe_step's sources with MOE_TRACE: lane 0 of each warp folds %globaltimer
into phase slots of the kernel-scope `sync` workspace (kernels/moe/moe_shapes.h, moe::stamp;
even slots the earliest, odd slots the latest). Per launch this script sets the slots, runs
one warm launch, and prints each phase's first and last stamp in microseconds after the
kernel's first stamp (medians over --reps launches on fresh random inputs). The gate/up and
down phases' first stamps are taken as the expert enters each pass (before its first readiness
wait: stamps inside the unit loop cost the expert registers it does not have).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "kernels" / "moe"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_bench import parse_counts, refused_as_fail, require_gpu  # noqa: E402

TRACE_WORD, SLOTS = 14848, 20  # moe_shapes.h: moe::TRACE, moe::TRACE_SLOTS
# the last three: the router's tile finishers (latest stamps only, moe::Stamp): partial sums
# read, tokens routed, ROUTED released
PHASES = ["router", "dispatch", "gate/up", "down", "combine", "kernel", "(unused)", "router sum",
          "routed", "signalled"]


def _check(res, what):
    err = res[0] if isinstance(res, tuple) else res
    if int(err) != 0:
        raise SystemExit(f"moe_trace: {what} failed: CUDA error {int(err)}")
    return res[1] if isinstance(res, tuple) and len(res) > 1 else None


def sync_pointer(session) -> int:
    ptrs = {v for k, v in session.plan.values.items() if k.startswith("@ws:") and k.endswith(".sync")}
    if len(ptrs) != 1:
        raise SystemExit(f"moe_trace: expected one kernel-scope sync workspace, found {sorted(ptrs)}")
    return ptrs.pop()


def trace_once(session, drv, torch) -> list[int]:
    base = sync_pointer(session) + 4 * TRACE_WORD
    init = (ctypes.c_uint64 * SLOTS)(*[(2**64 - 1) if i % 2 == 0 else 0 for i in range(SLOTS)])
    _check(drv.cuMemcpyHtoD(base, init, 8 * SLOTS), "setting the trace slots")
    session.launch()
    torch.cuda.synchronize()
    out = (ctypes.c_uint64 * SLOTS)()
    _check(drv.cuMemcpyDtoH(out, base, 8 * SLOTS), "reading the trace slots")
    return list(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", default="1,16,128,1024,4096,16384")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--name", default="moe_step_trace")
    a = ap.parse_args(argv)
    a.tokens = parse_counts(ap, "--tokens", a.tokens)
    if not require_gpu("moe_trace.py"):
        return 1
    return refused_as_fail(_run, a)


def _run(a) -> int:
    import torch
    from cuda.bindings import driver as drv

    import moe_bench
    import moe_step as m

    k = m.load(name=a.name)
    router_w, w13, w2, g = moe_bench.weights()
    print(f"{a.name}: phase [first, last] stamps in us after the kernel's first stamp (median of {a.reps})")
    print(f"{'T':>6} " + " ".join(f"{p:>17}" for p in PHASES))
    for T in a.tokens:
        rows = []
        for _ in range(a.reps + 1):  # the first launch warms up
            x = moe_bench.tokens(T, g)
            out = torch.full((T, 2048), float("nan"), dtype=torch.bfloat16, device="cuda")
            s = k.open(x, router_w, w13, w2, out)
            st = trace_once(s, drv, torch)
            if torch.isnan(out).any():
                raise SystemExit(f"moe_trace: T={T}: unwritten output")
            t0 = st[10]
            n = SLOTS // 2
            rows.append([(st[2 * i] - t0) / 1e3 if st[2 * i] != 2**64 - 1 else float("nan") for i in range(n)]
                        + [(st[2 * i + 1] - t0) / 1e3 if st[2 * i + 1] else float("nan") for i in range(n)])
        med = [statistics.median(r[j] for r in rows[1:]) for j in range(SLOTS)]
        print(f"{T:>6} " + " ".join(f"[{med[i]:7.1f},{med[n + i]:7.1f}]" for i in range(n)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
