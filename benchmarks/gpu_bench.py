"""GPU helpers shared by the benchmarks and GPU tests (run on the GPU machine; nothing is linked here).

  graph_of, interleaved
                CUDA graphs of launch functions, and their median time per call over rounds
                in rotating order (the bench tables of gemm_swiglu_bench.py, attention_bench.py,
                moe_bench.py; `eager` ones, which cannot be captured, as loops of calls).
  sanitizer     compute-sanitizer's path, or None: every sanitize gate fails without it.
  sanitize_jobs each worker command under memcheck, racecheck and synccheck, checked for a result.
  expect, run_gates
                a bad-input row (refused with an R-* code?), and the check / sanitize / pair /
                bench gates of one benchmark script run in order.
  paired_ratio  A-over-B time of two launch functions as ABBA rounds of CUDA-graph replays
                (benchmarks/gemm_swiglu_bench.py: linked / control, and the baselines).
  target        one launch of one cubin on a small problem, torch-free (driver API + numpy), with
                a result check: what compute-sanitizer runs (gemm_swiglu_bench.py sanitize,
                tests/linker/test_guard.py). Kernels: toy, and the gemm_swiglu interface (params x, w,
                out, m, n, k; facts block_m/n/k).

  builds        a benchmark's --builds value checked (parse_builds), on the CPU machine before a GPU run.
  whole         an argparse type: a whole number >= a minimum (the positional counts of the multi-rank scripts).
  gpu_world     the ranks of a one-process-per-GPU script: its world, or every visible GPU; too few: FAIL R-DEVICE.
  require_gpu   a benchmark's refusal to run where no CUDA GPU is usable: one FAIL R-DEVICE line with
                a hint, after its arguments are checked and before any CUDA work (not a traceback).

  python3 benchmarks/gpu_bench.py target --kernel gemm_swiglu --cubin bazel-bin/kernels/gemm_swiglu.cubin
  python3 benchmarks/gpu_bench.py builds before=.xfer/before --needs moe_step.manifest.json moe_step.cubin
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from pipelink.runtime import Kernel, LaunchError, gpu_unavailable_reason  # noqa: E402

GSW_TOL = 2e-2
# Kernel families with the gemm_swiglu interface (the `target` check).
GSW_KERNELS = ("gemm_swiglu", "gemm_swiglu_wgmma")


def graph_of(fn, inner: int):
    """`inner` calls of fn captured as one CUDA graph (after two eager warm-up calls), replayed once."""
    import torch
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    g.replay()
    torch.cuda.synchronize()
    return g


def expect(fn, code) -> tuple[bool, str]:
    """(refused with `code`, what was said): the benchmarks' bad-input rows (R-* codes)."""
    try:
        fn()
    except LaunchError as e:
        return e.code == code, f"{e.code}: {e.diagnostics[0].message} (hint: {e.hint})"
    return False, "was launched"


GATES = ("check", "sanitize", "pair", "bench")  # what `all` runs, in this order


def require_gpu(tool: str) -> bool:
    """True where a CUDA GPU is usable here (the driver API, and torch's CUDA where torch is
    installed); else False, after one FAIL R-DEVICE line that names `tool` and says why."""
    why = gpu_unavailable_reason()
    if why is None:
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None and not torch.cuda.is_available():
            why = f"torch {torch.__version__} has no CUDA"
    if why is None:
        return True
    print(f"FAIL R-DEVICE: {tool} needs a CUDA GPU: {why} (hint: run it on the GPU machine, e.g. through "
          "the device tool; BENCHMARKS.md, \"How a device run works\")", flush=True)
    return False


def run_gates(a, gates: dict) -> int:
    """Runs a.cmd (or every gate of GATES for `all`), each under a ==== header; ORs their exits. A
    refused launch (a build missing or stale, a bad argument) ends its gate with its code and hint."""
    rc = 0
    for cmd in (GATES if a.cmd == "all" else [a.cmd]):
        print(f"==== {cmd}", flush=True)
        rc |= refused_as_fail(gates[cmd], a)
    return rc


def gpu_world(world: int | None, tool: str) -> int | None:
    """The ranks of a one-process-per-GPU script: `world`, or every visible GPU where it is None;
    None after one FAIL R-DEVICE line where no GPU is usable (require_gpu) or fewer are visible."""
    if not require_gpu(tool):
        return None
    import torch
    gpus = torch.cuda.device_count()
    world = world or gpus
    if world > gpus:
        print(f"FAIL R-DEVICE: {tool}: world {world} needs {world} GPUs; {gpus} visible "
              "(hint: a multi-GPU machine kind)", flush=True)
        return None
    return world


def refused_as_fail(fn, *args) -> int:
    """fn(*args), or 1 after one FAIL line with the code and hint where the runtime refused a launch."""
    try:
        return fn(*args)
    except LaunchError as e:
        print(f"FAIL {e.code}: {e.diagnostics[0].message} (hint: {e.hint})", flush=True)
        return 1


def whole(minimum: int = 1):
    """An argparse type: a whole number >= minimum (a usage error naming the argument otherwise)."""
    def parse(text: str) -> int:
        if not (text.isascii() and text.isdigit() and int(text) >= minimum):
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= {minimum}")
        return int(text)
    parse.__name__ = f"whole number >= {minimum}"
    return parse


def parse_counts(ap: argparse.ArgumentParser, flag: str, text: str, minimum: int = 1) -> list[int]:
    """A comma-separated list of whole numbers >= minimum (token counts, sequence lengths, split
    counts): anything else is a usage error (exit 2) before anything runs, not a traceback."""
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not all(s.isascii() and s.isdigit() and int(s) >= minimum for s in items):
        ap.error(f"{flag} {text!r}: a comma-separated list of whole numbers >= {minimum}, "
                 f"e.g. {minimum},{2 * minimum}")
    return [int(s) for s in items]


def parse_shapes(ap: argparse.ArgumentParser, flag: str, text: str) -> list[tuple[int, int]]:
    """A comma-separated list of AxB pairs of whole numbers >= 1 (decode batch x KV length)."""
    pairs = [s.strip().split("x") for s in text.split(",") if s.strip()]
    if not all(len(q) == 2 and all(x.isascii() and x.isdigit() and int(x) >= 1 for x in q) for q in pairs):
        ap.error(f"{flag} {text!r}: a comma-separated list of BxKV pairs, e.g. 1x4096,8x32768")
    return [(int(b), int(kv)) for b, kv in pairs]


def parse_builds(ap: argparse.ArgumentParser, text: str, *needs: str) -> list[tuple[str, str]]:
    """--builds name=dir,...: other builds timed as extra columns. A malformed entry, or a dir
    where one of the globs `needs` matches nothing, is a usage error (exit 2), not a dropped column."""
    builds = []
    for entry in (e for e in text.split(",") if e):
        name, eq, bdir = entry.partition("=")
        if not (name and eq and bdir):
            ap.error(f"--builds: {entry!r} is not name=dir (e.g. before=.xfer/before)")
        for glob in needs:
            if not any(Path(bdir).glob(glob)):
                ap.error(f"--builds {entry}: no {glob} in {bdir} (copy a build's bazel-bin outputs there)")
        builds.append((name, bdir))
    return builds


def sanitizer() -> str | None:
    """compute-sanitizer on PATH or in /usr/local/cuda, else None (a gate must then fail)."""
    import shutil
    san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    return san if Path(san).exists() else None


# compute-sanitizer's tools as the gates run them: memcheck without API-error reports (PyTorch's
# own driver calls, e.g. probing primary contexts, return errors by design).
SANITIZER_TOOLS = {"memcheck": ["--report-api-errors", "no"], "racecheck": [], "synccheck": []}
# every tool compute-sanitizer has, for scripts that take one by name (the multi-rank checks)
COMPUTE_SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")


def sanitize_jobs(jobs: list[tuple[str, list[str]]], timeout: float = 900.0, parallel: int = 4) -> int:
    """Each (label, argv) under each of SANITIZER_TOOLS: clean when the tool exits 0 and the run
    prints `RESULT correct` (it checked its own output). Runs `parallel` at once (racecheck is
    bound by the host CPU, not the GPU); prints a PASS/FAIL line as each run ends, and a summary;
    1 if any run failed or compute-sanitizer is missing (the gate cannot pass without it)."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor, as_completed
    san = sanitizer()
    if san is None:
        print("FAIL compute-sanitizer not found: the sanitizer gate cannot pass without it")
        return 1

    def run(label_tool_argv):
        label, tool, argv = label_tool_argv
        cmd = [san, "--tool", tool, *SANITIZER_TOOLS[tool], "--error-exitcode", "9", "--print-limit", "10", *argv]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            return p.stdout + p.stderr, p.returncode
        except subprocess.TimeoutExpired:
            return f"timed out after {timeout:.0f} s", -1

    runs = [(label, tool, argv) for label, argv in jobs for tool in SANITIZER_TOOLS]
    bad = 0
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        # racecheck runs, the slowest by far, start first; each prints when it ends
        order = sorted(runs, key=lambda r: r[1] != "racecheck")
        started = {pool.submit(run, r): r for r in order}
        for done in as_completed(started):
            (label, tool, _), (text, rc) = started[done], done.result()
            ok = rc == 0 and "RESULT correct" in text
            bad += not ok
            print(f"{'PASS' if ok else 'FAIL'}  {label:<18} {tool:<10} rc={rc} "
                  f"{' | '.join(ln.strip() for ln in text.splitlines() if 'SUMMARY' in ln or 'RESULT' in ln)}",
                  flush=True)
            if not ok:
                print("    " + "\n    ".join(text.splitlines()[-25:]))
    print(f"sanitize: {len(runs) - bad}/{len(runs)} clean")
    return 1 if bad else 0


SUSTAIN_MAX_INNER = 4000  # calls in one graph at most (capture time and graph size)


def sustained_inner(unit, inner: int, sustain_ms: float) -> int:
    """Calls per timed unit so that one unit holds >= sustain_ms of back-to-back work (the
    power-limited regime long kernels run in), from one timed run of `unit` (`inner` calls)."""
    import torch
    unit()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    unit()
    e1.record()
    torch.cuda.synchronize()
    per_call = e0.elapsed_time(e1) / inner
    return min(SUSTAIN_MAX_INNER, max(inner, math.ceil(sustain_ms / max(per_call, 1e-6))))


def interleaved(fns: dict, inner: int, rounds: int, *, skip_failing: bool = False,
                eager: frozenset | set = frozenset(), sustain_ms: float = 0.0) -> dict[str, float]:
    """Median us per call of each fn: graphs replayed in rounds, order rotating and reversing
    every other round. skip_failing: a fn that cannot be captured (a baseline that does not
    run on this machine) is reported and left out instead of raising. The fns named in `eager`
    (ones that sync with the host, which a graph cannot hold) are timed as `inner` plain calls.
    sustain_ms: each fn's graph holds as many calls as fill that many ms (sustained_inner), at
    least `inner`; 0 keeps `inner` for all."""
    import torch
    runs, calls = {}, {}  # name -> one timed unit (a graph replay or eager calls), its call count
    for k, f in fns.items():
        try:
            n = inner
            if k in eager:
                for _ in range(2):
                    f()
                torch.cuda.synchronize()
                if sustain_ms:
                    n = sustained_inner(lambda f=f: [f() for _ in range(inner)], inner, sustain_ms)
                runs[k] = lambda f=f, n=n: [f() for _ in range(n)]
            else:
                if sustain_ms:
                    n = sustained_inner(graph_of(f, inner).replay, inner, sustain_ms)
                runs[k] = graph_of(f, n).replay
            calls[k] = n
        except Exception as e:  # noqa: BLE001 - reported, not fatal, when asked
            if not skip_failing:
                raise
            print(f"    ({k}: not timed: {type(e).__name__}: {str(e).splitlines()[0][:120]})")
    names = list(runs)
    ev = []
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        if r % 2:
            order.reverse()
        for n in order:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            runs[n]()
            e1.record()
            ev.append((n, e0, e1))
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {n: [] for n in names}
    for n, e0, e1 in ev:
        times[n].append(e0.elapsed_time(e1) * 1e3 / calls[n])
    return {n: statistics.median(t) for n, t in times.items()}


def paired_ratio(fa, fb, inner: int, rounds: int) -> tuple[float, float, float, float]:
    """Linked-over-control time, measured as ABBA rounds of CUDA-graph replays back to back.

    A heavy GEMM drives the H200 to its power limit, and its clock drifts by several percent
    over seconds: timing each variant in its own stretch (even interleaved) shows that drift as
    a difference. ABBA cancels any drift that is linear over one round; the median over rounds
    resists the rest. Returns (median ratio, IQR of the ratios, median A us, median B us).
    """
    import torch
    graphs = [graph_of(f, inner) for f in (fa, fb)]
    ev = [[torch.cuda.Event(enable_timing=True) for _ in range(5)] for _ in range(rounds)]
    for r in range(rounds):
        e = ev[r]
        e[0].record()
        for i, g in enumerate((graphs[0], graphs[1], graphs[1], graphs[0])):
            g.replay()
            e[i + 1].record()
    torch.cuda.synchronize()
    ratios, ta, tb = [], [], []
    for e in ev:
        t = [e[i].elapsed_time(e[i + 1]) for i in range(4)]
        ratios.append((t[0] + t[3]) / (t[1] + t[2]))
        ta.append((t[0] + t[3]) / 2 * 1e3 / inner)
        tb.append((t[1] + t[2]) / 2 * 1e3 / inner)
    q = statistics.quantiles(ratios, n=4)
    return statistics.median(ratios), q[2] - q[0], statistics.median(ta), statistics.median(tb)


def both_ways_ratio(own, swapped, inner: int, rounds: int) -> tuple[float, float, float, float, float, float]:
    """paired_ratio of (A, B) on their own buffers, then of (A', B'): the same kernels with their
    buffers exchanged (A on B's workspaces and output, B on A's). The geometric mean cancels
    where the buffers lie, which alone moved one cubin against itself by up to 1.2% (moe_step;
    BENCHMARKS.md, "Method"). -> (ratio, the larger IQR, A us, B us, own ratio, swapped ratio)."""
    r1, q1, a1, b1 = paired_ratio(*own, inner, rounds)
    r2, q2, a2, b2 = paired_ratio(*swapped, inner, rounds)
    return math.sqrt(r1 * r2), max(q1, q2), math.sqrt(a1 * a2), math.sqrt(b1 * b2), r1, r2


def cmd_target(a) -> int:
    import numpy as np
    from cuda.bindings import driver as cu

    def ok(r):
        if r[0] != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA error {r[0]}")
        return r[1] if len(r) == 2 else None

    k = Kernel.load(a.cubin, a.manifest)
    ctx = ok(cu.cuDevicePrimaryCtxRetain(ok(cu.cuDeviceGet(0))))
    ok(cu.cuCtxPushCurrent(ctx))
    rng = np.random.default_rng()
    bufs = []

    def dev(arr):
        p = ok(cu.cuMemAlloc(max(arr.nbytes, 1)))
        ok(cu.cuMemcpyHtoD(p, arr.ctypes.data, arr.nbytes))
        bufs.append(p)
        return int(p)

    def back(p, arr):
        ok(cu.cuMemcpyDtoH(arr.ctypes.data, p, arr.nbytes))
        return arr

    if a.kernel == "toy":
        blocks, tiles, tile = 3, 5, k.manifest.facts["tile"]
        x = rng.standard_normal(blocks * tiles * tile).astype(np.float32)
        out = np.full(blocks * 128, np.nan, np.float32)
        dx, do = dev(x), dev(out)
        k.launch(stream=0, **{"in": dx, "out": do, "tiles": tiles, "blocks": blocks})
        ok(cu.cuCtxSynchronize())
        back(do, out)
        xv = x.astype(np.float64).reshape(blocks, tiles, tile // 32, 32)
        s = (xv * np.arange(1, tiles + 1).reshape(1, tiles, 1, 1)).sum(axis=(1, 2))
        ref = np.zeros((blocks, 32, 4))
        ref[:, np.arange(32), np.arange(32) % 4] = s
        good = not np.isnan(out).any() and np.allclose(out.reshape(blocks, 32, 4), ref, rtol=1e-4, atol=1e-3)
    elif a.kernel in GSW_KERNELS:
        f = k.manifest.facts
        M, N, K = 2 * f["block_m"], 2 * f["block_n"], 3 * f["block_k"]

        def bf16(v):  # round-to-nearest-even f32 -> bf16 bits, and the values they hold
            b = v.astype(np.float32).view(np.uint32)
            b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
            return b, (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        xb, xf = bf16(rng.uniform(-1, 1, (M, K)))
        wb, wf = bf16(rng.uniform(-1, 1, (2 * N, K)) * (2 / K**0.5))
        out = np.full((M, N), 0x7FC0, np.uint16)  # bf16 NaN
        dx, dw, do = dev(xb), dev(wb), dev(out)
        k.launch(stream=0, x=dx, w=dw, out=do, m=M, n=N, k=K)
        ok(cu.cuCtxSynchronize())
        back(do, out)
        got = (out.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        h = xf @ wf.T
        ref = h[:, :N] / (1 + np.exp(-h[:, :N])) * h[:, N:]
        rel = np.abs(got - ref) / (np.abs(ref) + 1e-2 * np.sqrt((ref**2).mean()))
        good = not np.isnan(got).any() and float(np.nan_to_num(rel).max()) <= GSW_TOL
    else:
        print(f"unknown kernel {a.kernel}")
        return 2
    for p in bufs:
        ok(cu.cuMemFree(p))
    cu.cuCtxPopCurrent()
    print("RESULT OK" if good else "RESULT WRONG")
    return 0 if good else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("target")
    t.add_argument("--kernel", required=True, choices=("toy", *GSW_KERNELS), help="the kernel interface to drive")
    t.add_argument("--cubin", required=True)
    t.add_argument("--manifest")
    b = sub.add_parser("builds", help="check a --builds value; print the builds it names as JSON")
    b.add_argument("builds", help="name=dir,... as a benchmark's --builds takes it")
    b.add_argument("--needs", nargs="*", default=[], help="globs each dir must match (the benchmark's files)")
    a = ap.parse_args(argv)
    if a.cmd == "builds":
        print(json.dumps(parse_builds(b, a.builds, *a.needs)))
        return 0
    return refused_as_fail(cmd_target, a)


if __name__ == "__main__":
    sys.exit(main())
