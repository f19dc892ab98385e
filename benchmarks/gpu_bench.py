"""GPU checks and timings of linked pipelink kernels against their controls (run on the GPU machine).

Reads a folder made by benchmarks/build_artifacts.sh (index.json + per-config linked cubin,
control cubin and manifest); links nothing (the GPU machine has no z3). Subcommands:

  check     correctness of every config, linked and control: fresh random inputs, outputs
            poisoned with NaN first (every element must be written), compared with an f64
            reference. Tolerances: toy |err| <= 2 * (terms + 4) * 2^-24 * sum|terms| (the
            f32 recursive-summation bound); gemm_swiglu max over elements of
            |out - ref| / (|ref| + 0.01 * rms(ref)) <= 2e-2 (bf16 output rounding is 2^-9 relative).
            Also checks that unsupported shapes are refused (R-SHAPE) before launching.
  bench     timing: for each problem, every variant (each config's linked and control
            kernel; for gemm_swiglu also torch eager matmul + SwiGLU and torch.compile of it)
            is captured in a CUDA graph of --inner back-to-back launches; the graphs are
            replayed --reps times, variants interleaved in rotating order, each replay timed
            with CUDA events; the table shows the median per launch, the IQR, and the
            linked/control ratio. Outputs are checked once before timing.
  sanitize  compute-sanitizer --tool memcheck|racecheck|synccheck on each linked kernel
            (small shapes, one process per kernel and tool, through `target`); prints error counts.
  target    one launch of one cubin on a small problem, torch-free (driver API + numpy), with
            a result check: what `sanitize` runs under compute-sanitizer.

  python3 benchmarks/gpu_bench.py check --artifacts .devbuild [--kernels toy,gemm_swiglu]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "kernels" / "gemm_swiglu"))

from pipelink.runtime import Kernel, LaunchError  # noqa: E402

TOY_SHAPES_CHECK = [(1, 1), (3, 7), (132, 33), (1000, 2)]  # (blocks, tiles)
TOY_BENCH = (132 * 8, 64)
# (M, N, K): the Qwen3-32B MLP gate+up projection (hidden 5120, intermediate 25600; w is
# [2N, K] = [51200, 5120]) at M = 128, 1024, 4096.
GSW_BENCH = [(128, 25600, 5120), (1024, 25600, 5120), (4096, 25600, 5120)]
GSW_TOL = 2e-2
# Kernel families with the gemm_swiglu interface (params x, w, out, m, n, k; facts block_m/n/k):
# the mma.sync composition and its wgmma variant (mainloop_wgmma + swiglu -DSWIGLU_LAYOUT_WGMMA).
GSW_KERNELS = ("gemm_swiglu", "gemm_swiglu_wgmma")


# ---- artifacts ---------------------------------------------------------------------------

def configs(artifacts: Path, kernels: list[str] | None) -> list[dict]:
    index = artifacts / "index.json"
    if not index.exists():
        sys.exit(f"{index} not found: build it with benchmarks/build_artifacts.sh and carry the folder")
    out = []
    for c in json.loads(index.read_text())["configs"]:
        if kernels and c["kernel"] not in kernels:
            continue
        base = artifacts / c["dir"]
        c = dict(c, linked=base / c["linked"], control=base / c["control"], manifest=base / c["manifest"])
        out.append(c)
    return out


def label(c: dict) -> str:
    rest = c["name"].split("/", 1)[1]
    return f"wgmma/{rest}" if c["kernel"] == "gemm_swiglu_wgmma" else rest


# ---- toy -----------------------------------------------------------------------------------

def toy_run(k: Kernel, blocks: int, tiles: int, *, check: bool = True):
    import torch
    tile = k.manifest.facts["tile"]
    x = torch.randn(blocks * tiles * tile, device="cuda")
    out = torch.full((blocks * 128,), float("nan"), device="cuda")
    params = {"in": x, "out": out, "tiles": tiles, "blocks": blocks}
    k(**params)
    torch.cuda.synchronize()
    return (toy_error(out, x, blocks, tiles, tile) if check else None), params


def toy_error(out, x, blocks, tiles, tile) -> tuple[bool, str]:
    import torch
    xv = x.double().view(blocks, tiles, tile // 32, 32)
    w = torch.arange(1, tiles + 1, dtype=torch.float64, device=x.device).view(1, tiles, 1, 1)
    s, a = (xv * w).sum(dim=(1, 2)), (xv.abs() * w).sum(dim=(1, 2))
    lanes = torch.arange(32, device=x.device)
    ref = torch.zeros(blocks, 32, 4, dtype=torch.float64, device=x.device)
    mag = torch.zeros_like(ref)
    ref[:, lanes, lanes % 4], mag[:, lanes, lanes % 4] = s, a
    got = out.double().view(blocks, 32, 4)
    unwritten = int(torch.isnan(got).sum())
    tol = 2 * (tiles * tile // 32 + 4) * 2.0**-24 * mag
    err = (got - ref).abs()
    bad = int((err > tol).sum())
    ratio = float((err / (tol + 1e-300)).max())
    return unwritten == 0 and bad == 0, f"unwritten={unwritten} bad={bad} max|err|/tol={ratio:.3f}"


# ---- gemm_swiglu ---------------------------------------------------------------------------

def gsw_inputs(M, N, K):
    import torch
    x = (torch.rand(M, K, device="cuda") * 2 - 1).bfloat16()
    w = ((torch.rand(2 * N, K, device="cuda") * 2 - 1) * (2 / K**0.5)).bfloat16()
    return x, w


def gsw_error(out, x, w) -> tuple[bool, str]:
    import torch
    from gemm_swiglu import reference
    ref = reference(x, w)
    unwritten = int(torch.isnan(out).sum())
    rel = ((out.double() - ref).abs() / (ref.abs() + 1e-2 * ref.pow(2).mean().sqrt())).nan_to_num(0.0)
    r = float(rel.max())
    return unwritten == 0 and r <= GSW_TOL, f"unwritten={unwritten} max_rel={r:.3e} (tol {GSW_TOL})"


def torch_swiglu(x, w):
    import torch.nn.functional as F
    N = w.shape[0] // 2
    h = x @ w.t()
    return F.silu(h[:, :N]) * h[:, N:]


# ---- check ---------------------------------------------------------------------------------

def cmd_check(a) -> int:
    import torch
    from gemm_swiglu import GemmSwiglu
    fails = 0
    rows = []
    for c in configs(a.artifacts, a.kernels):
        for variant in ("linked", "control"):
            try:
                if c["kernel"] == "toy":
                    k = Kernel.load(c[variant], c["manifest"])
                    for blocks, tiles in TOY_SHAPES_CHECK:
                        (ok, msg), _ = toy_run(k, blocks, tiles)
                        rows.append((c["name"], variant, f"blocks={blocks} tiles={tiles}", ok, msg))
                    # refusals: a missing grid size, a CPU tensor
                    for bad, code in (({"tiles": 1}, "R-PARAM"),
                                      ({"tiles": 1, "blocks": 1, "in": torch.zeros(256 * 4)}, "R-DEVICE")):
                        p = {"in": torch.zeros(1024, device="cuda"), "out": torch.zeros(128, device="cuda"), **bad}
                        rows.append(expect_refusal(c["name"], variant, lambda: k(**p), code))
                elif c["kernel"] in GSW_KERNELS:
                    g = GemmSwiglu(c[variant], c["manifest"])
                    bm, bn, bk = g.block_m, g.block_n, g.block_k
                    for M, N, K in ((bm, bn, bk), (2 * bm, 3 * bn, 5 * bk), (512, 384, 1024), (1024, 1536, 2048)):
                        x, w = gsw_inputs(M, N, K)
                        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                        g(x, w, out)
                        torch.cuda.synchronize()
                        ok, msg = gsw_error(out, x, w)
                        rows.append((c["name"], variant, f"M={M} N={N} K={K}", ok, msg))
                    x, w = gsw_inputs(bm + 16, bn, bk)
                    rows.append(expect_refusal(c["name"], variant, lambda: g(x, w), "R-SHAPE"))
                    x, w = gsw_inputs(bm, bn, bk + 8)
                    rows.append(expect_refusal(c["name"], variant, lambda: g(x, w), "R-SHAPE"))
                    rows.append(expect_refusal(c["name"], variant, lambda: g(x.float(), w), "R-DTYPE"))
            except LaunchError as e:
                rows.append((c["name"], variant, "load/launch", False, str(e).replace("\n", " | ")))
    for r in rows:
        fails += not r[3]
        print(f"{'PASS' if r[3] else 'FAIL'}  {r[0]:<28} {r[1]:<8} {r[2]:<26} {r[4]}")
    print(f"check: {len(rows) - fails}/{len(rows)} passed")
    return 1 if fails else 0


def expect_refusal(name, variant, fn, code):
    try:
        fn()
    except LaunchError as e:
        return (name, variant, f"refuses ({code})", e.code == code, f"{e.code}: {e.diagnostics[0].message}")
    return (name, variant, f"refuses ({code})", False, "was launched")


# ---- bench ---------------------------------------------------------------------------------

class Variant:
    def __init__(self, name: str, fn, group: str):
        self.name, self.fn, self.group = name, fn, group
        self.graph = None
        self.times: list[float] = []


def time_variants(variants: list[Variant], inner: int, reps: int, warmup: int = 3) -> None:
    import torch
    for v in variants:
        for _ in range(warmup):
            v.fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(inner):
                v.fn()
        v.graph = g
        g.replay()
    torch.cuda.synchronize()
    events = []
    for r in range(reps):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for v in order:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            v.graph.replay()
            e1.record()
            events.append((v, e0, e1))
    torch.cuda.synchronize()
    for v, e0, e1 in events:
        v.times.append(e0.elapsed_time(e1) * 1e3 / inner)  # microseconds per launch
    for v in variants:
        v.graph = None


def summary(v: Variant) -> tuple[float, float]:
    ts = sorted(v.times)
    q = statistics.quantiles(ts, n=4) if len(ts) >= 4 else [ts[0], statistics.median(ts), ts[-1]]
    return statistics.median(ts), q[2] - q[0]


def cmd_bench(a) -> int:
    import torch
    from gemm_swiglu import GemmSwiglu
    results = []
    cs = configs(a.artifacts, a.kernels)
    bad = 0
    print(f"timing: median over {a.reps} replays of a CUDA graph of {a.inner} launches, per launch; "
          "variants interleaved (rotating order); CUDA events")
    # ---- toy: one problem per tile size
    toy = [c for c in cs if c["kernel"] == "toy"]
    for tile in sorted({c["config"]["tile"] for c in toy}):
        blocks, tiles = TOY_BENCH
        group = f"toy tile={tile} blocks={blocks} tiles={tiles}"
        variants = []
        for c in (c for c in toy if c["config"]["tile"] == tile):
            for kind in ("linked", "control"):
                k = Kernel.load(c[kind], c["manifest"])
                (ok, msg), params = toy_run(k, blocks, tiles)
                if not ok:
                    bad += 1
                    print(f"FAIL {c['name']} {kind}: {msg}")
                variants.append(Variant(f"{label(c)}:{kind}", (lambda k=k, p=params: k(**p)), group))
        nbytes = blocks * tiles * tile * 4
        time_variants(variants, a.inner, a.reps)
        results += report(group, variants, {"GB/s": lambda us: nbytes / us / 1e3})
    # ---- gemm_swiglu: each shape, every config + torch
    gsw = [c for c in cs if c["kernel"] in GSW_KERNELS]
    shapes = GSW_BENCH[:1] if a.quick else GSW_BENCH
    for M, N, K in (shapes if gsw else []):
        group = f"gemm_swiglu M={M} N={N} K={K}"
        x, w = gsw_inputs(M, N, K)
        variants = []
        for c in gsw:
            cfg = c["config"]
            if M % cfg["block_m"] or N % cfg["block_n"] or K % cfg["block_k"]:
                continue
            for kind in ("linked", "control"):
                g = GemmSwiglu(c[kind], c["manifest"])
                out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                g(x, w, out)
                torch.cuda.synchronize()
                ok, msg = gsw_error(out, x, w)
                if not ok:
                    bad += 1
                    print(f"FAIL {c['name']} {kind} {group}: {msg}")
                variants.append(Variant(f"{label(c)}:{kind}", (lambda g=g, o=out: g(x, w, o)), group))
        variants.append(Variant("torch eager (cuBLAS + SwiGLU)", lambda: torch_swiglu(x, w), group))
        if not a.no_compile:
            t0 = time.time()
            comp = torch.compile(torch_swiglu, dynamic=False, mode=a.compile_mode)
            comp(x, w)
            torch.cuda.synchronize()
            mode = a.compile_mode or "default"
            print(f"  torch.compile(mode={mode}) for {group}: {time.time() - t0:.1f} s")
            variants.append(Variant(f"torch.compile {mode}", lambda: comp(x, w), group))
        flops = 2 * M * 2 * N * K
        time_variants(variants, a.inner if M * N * K < 2**34 else max(2, a.inner // 4), a.reps)
        results += report(group, variants, {"TFLOP/s": lambda us: flops / us / 1e6})
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 1 if bad else 0


def report(group: str, variants: list[Variant], rates: dict) -> list[dict]:
    print(f"\n== {group}")
    med = {v.name: summary(v) for v in variants}
    rate_names = list(rates)
    print(f"  {'variant':<34} {'median us':>10} {'IQR us':>8} " + " ".join(f"{r:>9}" for r in rate_names) +
          f" {'linked/control':>15}")
    out = []
    for v in variants:
        m, iqr = med[v.name]
        ratio = ""
        if v.name.endswith(":linked"):
            ctl = med.get(v.name[: -len(":linked")] + ":control")
            if ctl:
                ratio = f"{m / ctl[0]:.3f}"
        print(f"  {v.name:<34} {m:>10.2f} {iqr:>8.2f} " + " ".join(f"{rates[r](m):>9.1f}" for r in rate_names) +
              f" {ratio:>15}")
        out.append({"group": group, "variant": v.name, "median_us": m, "iqr_us": iqr, "n": len(v.times),
                    **{r: rates[r](m) for r in rate_names}, "linked_over_control": float(ratio) if ratio else None})
    return out


# ---- pair: linked vs control, ABBA ---------------------------------------------------------

def paired_ratio(fa, fb, inner: int, rounds: int) -> tuple[float, float, float, float]:
    """Linked-over-control time, measured as ABBA rounds of CUDA-graph replays back to back.

    A heavy GEMM drives the H200 to its power limit, and its clock drifts by several percent
    over seconds: timing each variant in its own stretch (even interleaved) shows that drift as
    a difference. ABBA cancels any drift that is linear over one round; the median over rounds
    resists the rest. Returns (median ratio, IQR of the ratios, median A us, median B us).
    """
    import torch
    graphs = []
    for f in (fa, fb):
        for _ in range(2):
            f()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(inner):
                f()
        g.replay()
        graphs.append(g)
    torch.cuda.synchronize()
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


def cmd_pair(a) -> int:
    import torch
    from gemm_swiglu import GemmSwiglu
    cs = configs(a.artifacts, a.kernels)
    rows = []
    print(f"linked vs control: ABBA rounds of graph replays, median over {a.rounds} rounds")
    print(f"  {'config':<34} {'shape':<22} {'linked us':>10} {'control us':>10} {'linked/control':>14} {'IQR':>7}")
    toy = [c for c in cs if c["kernel"] == "toy"]
    for c in toy:
        blocks, tiles = TOY_BENCH
        ks = [Kernel.load(c[kind], c["manifest"]) for kind in ("linked", "control")]
        params = toy_run(ks[0], blocks, tiles)[1]
        r, iqr, ta, tb = paired_ratio(lambda: ks[0](**params), lambda: ks[1](**params), 20, a.rounds)
        rows.append({"config": c["name"], "shape": f"{blocks}x{tiles}", "linked_us": ta, "control_us": tb,
                     "ratio": r, "iqr": iqr})
    gsw = [c for c in cs if c["kernel"] in GSW_KERNELS]
    for M, N, K in (GSW_BENCH if gsw else []):
        x, w = gsw_inputs(M, N, K)
        inner = 20 if M * N * K < 2**34 else (4 if M * N * K < 2**38 else 2)
        for c in gsw:
            cfg = c["config"]
            if M % cfg["block_m"] or N % cfg["block_n"] or K % cfg["block_k"]:
                continue
            ga, gb = (GemmSwiglu(c[kind], c["manifest"]) for kind in ("linked", "control"))
            oa = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
            ob = torch.empty_like(oa)
            r, iqr, ta, tb = paired_ratio(lambda: ga(x, w, oa), lambda: gb(x, w, ob), inner, a.rounds)
            rows.append({"config": label(c), "shape": f"{M}x{N}x{K}", "linked_us": ta, "control_us": tb,
                         "ratio": r, "iqr": iqr})
    for row in rows:
        print(f"  {row['config']:<34} {row['shape']:<22} {row['linked_us']:>10.2f} {row['control_us']:>10.2f} "
              f"{row['ratio']:>14.4f} {row['iqr']:>7.4f}")
    worst = max(rows, key=lambda r: abs(r["ratio"] - 1))
    print(f"pair: {len(rows)} configurations; worst |linked/control - 1| = {abs(worst['ratio'] - 1) * 100:.2f}% "
          f"({worst['config']} {worst['shape']}); geomean ratio "
          f"{statistics.geometric_mean([r['ratio'] for r in rows]):.4f}")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


# ---- sanitize ------------------------------------------------------------------------------

def find_sanitizer() -> str | None:
    for c in (shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer",
              "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
        if c and os.path.exists(c):
            return c
    return None


def cmd_sanitize(a) -> int:
    san = find_sanitizer()
    if not san:
        print("compute-sanitizer not found: skipped")
        return 1
    cs = [c for c in configs(a.artifacts, a.kernels)]
    if a.quick:  # one config per kernel: the solver's own depth
        seen, pick = set(), []
        for c in sorted(cs, key=lambda c: c["config"].get("depth") != "free"):
            if c["kernel"] not in seen:
                seen.add(c["kernel"])
                pick.append(c)
        cs = pick
    jobs = [(c, tool) for c in cs for tool in a.tools.split(",")]

    def run(job):
        c, tool = job
        cmd = [san, "--tool", tool, "--error-exitcode", "9", "--print-limit", "10"]
        if tool == "racecheck":
            cmd += ["--racecheck-report", "all"]
        cmd += [sys.executable, __file__, "target", "--kernel", c["kernel"], "--cubin", str(c["linked"]),
                "--manifest", str(c["manifest"])]
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
        except subprocess.TimeoutExpired as e:  # report it as a failure, keep the others going
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            p = subprocess.CompletedProcess(cmd, 124, out, f"TIMEOUT after {a.timeout} s")
        return c, tool, p, time.time() - t0

    bad = 0
    logs: list[str] = []
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        for c, tool, p, dt in ex.map(run, jobs):
            text = p.stdout + p.stderr
            m = re.search(r"ERROR SUMMARY: (\d+) error", text)
            r = re.search(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)", text)
            errors = int(m.group(1)) if m else None
            extra = ""
            if r:
                extra = f" hazards={r.group(1)} (errors {r.group(2)}, warnings {r.group(3)})"
                errors = int(r.group(2)) if errors is None else errors
            target_ok = "RESULT OK" in text
            ok = p.returncode == 0 and errors == 0 and target_ok
            bad += not ok
            print(f"{'PASS' if ok else 'FAIL'}  {c['name']:<28} {tool:<10} errors={errors if errors is not None else '?'}"
                  f"{extra} result={'ok' if target_ok else 'WRONG/none'} rc={p.returncode} ({dt:.1f} s)")
            if not ok:  # the findings, without the host backtraces (full text in --log)
                keep = [ln for ln in text.splitlines() if ln.strip(" =") and "Host Frame" not in ln]
                print("    " + "\n    ".join(keep[:30]))
            logs.append(f"######## {c['name']} {tool}: rc={p.returncode}\n$ {' '.join(p.args)}\n{text}\n")
    if a.log:
        Path(a.log).parent.mkdir(parents=True, exist_ok=True)
        Path(a.log).write_text("".join(logs))
        print(f"full sanitizer output: {a.log}")
    print(f"sanitize: {len(jobs) - bad}/{len(jobs)} clean")
    return 1 if bad else 0


# ---- target (torch-free; runs under compute-sanitizer) -------------------------------------

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("check", "bench", "sanitize", "pair"):
        p = sub.add_parser(name)
        p.add_argument("--artifacts", type=Path, default=ROOT / ".devbuild")
        p.add_argument("--kernels", type=lambda s: [k for k in s.split(",") if k], default=None,
                       help="comma-separated: toy,gemm_swiglu,gemm_swiglu_wgmma (default: all in the index)")
        p.add_argument("--quick", action="store_true", help="fewer shapes (bench) / one config per kernel (sanitize)")
    b = sub.choices["bench"]
    b.add_argument("--reps", type=int, default=30)
    b.add_argument("--inner", type=int, default=20, help="launches per graph replay")
    b.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    b.add_argument("--compile-mode", default="default", help="torch.compile mode (e.g. max-autotune-no-cudagraphs)")
    b.add_argument("--json", help="also write the results here")
    pr = sub.choices["pair"]
    pr.add_argument("--rounds", type=int, default=41)
    pr.add_argument("--json", help="also write the results here")
    s = sub.choices["sanitize"]
    s.add_argument("--tools", default="memcheck,racecheck,synccheck")
    s.add_argument("--jobs", type=int, default=4)
    s.add_argument("--timeout", type=int, default=300)
    s.add_argument("--log", help="write every sanitizer's full output to this file")
    t = sub.add_parser("target")
    t.add_argument("--kernel", required=True)
    t.add_argument("--cubin", required=True)
    t.add_argument("--manifest")
    a = ap.parse_args()
    if a.cmd == "bench" and a.compile_mode == "default":
        a.compile_mode = None
    return {"check": cmd_check, "bench": cmd_bench, "sanitize": cmd_sanitize, "target": cmd_target,
            "pair": cmd_pair}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
