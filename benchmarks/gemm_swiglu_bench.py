"""GEMM + SwiGLU on the H200 (issue 8): correctness, linked vs control, and the baselines.

Reads the kernels Bazel built (nothing is compiled or linked here):

    tools/bazel build //kernels/... --output_groups=+control      # on the CPU machine
    # device tool, carry ["bazel-bin/kernels", ".whl"]:
    python3 benchmarks/gemm_swiglu_bench.py all --kernels gemm_swiglu_tma,gemm_swiglu_tma_bn64

Subcommands (each prints one table; `all` runs check, sanitize, pair, bench):
  check  every kernel, linked and control, on fresh random inputs with the output poisoned
         (NaN) first: every element must be written, and max |out - ref| / (|ref| +
         0.01 rms(ref)) <= 2e-2 against a float64 reference (bf16 output rounding is 2^-9
         relative). Small shapes are compared whole; the Qwen shapes against float64 on 256
         sampled rows (tile edges included) and whole against an fp32-accumulated
         reference. Unsupported inputs must be refused with their R-* code before launch.
  pair   linked / control time per kernel and M: ABBA rounds of CUDA-graph replays, each kernel
         on its own output and then on the other's (gpu_bench.both_ways_ratio).
  bench  Qwen3-32B gate+up (x [M, 5120], w [51200, 5120]) for each M: every kernel and the
         baselines, each captured as a CUDA graph, replayed in interleaved rounds (rotating
         order), median per call; TFLOP/s, and at M = 128 the weight bandwidth against a
         measured device-to-device copy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "kernels" / "gemm_swiglu"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gemm_swiglu import GemmSwiglu, reference  # noqa: E402
from gpu_bench import both_ways_ratio, expect, interleaved, parse_counts, require_gpu, run_gates, sanitizer  # noqa: E402  (ABBA rounds of graph replays)

HIDDEN, INTER = 5120, 25600  # Qwen3-32B: x [M, 5120] @ w[51200, 5120]^T -> [M, 25600]
BENCH_M = [128, 512, 1024, 2048, 4096, 8192]
TOL = 2e-2
BIN = Path(os.environ.get("PIPELINK_KERNELS_DIR") or ROOT / "bazel-bin" / "kernels")  # a copy with extra builds


def load(name: str, control: bool = False) -> GemmSwiglu:
    cubin = BIN / (f"{name}.control.cubin" if control else f"{name}.cubin")
    return GemmSwiglu(cubin, BIN / f"{name}.manifest.json")


def inputs(M, N, K, seed=None):
    import torch
    g = torch.Generator(device="cuda")
    g.manual_seed(seed if seed is not None else torch.seed() % 2**31)
    x = (torch.rand(M, K, device="cuda", generator=g) * 2 - 1).bfloat16()
    w = ((torch.rand(2 * N, K, device="cuda", generator=g) * 2 - 1) * (2 / K**0.5)).bfloat16()
    return x, w


def rel_error(out, ref) -> float:
    rms = ref.pow(2).mean().sqrt()
    return float(((out.double() - ref).abs() / (ref.abs() + 1e-2 * rms)).nan_to_num(0.0).max())


def torch_swiglu(x, w):
    import torch.nn.functional as F
    N = w.shape[0] // 2
    h = x @ w.t()
    return F.silu(h[:, :N]) * h[:, N:]


def check_one(g: GemmSwiglu, M, N, K) -> tuple[bool, str]:
    import torch
    x, w = inputs(M, N, K)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    g(x, w, out)
    torch.cuda.synchronize()
    unwritten = int(torch.isnan(out).sum())
    if M * N * K <= 2**33:
        err = rel_error(out, reference(x, w))
        how = "f64 whole"
    else:  # f64 on sampled rows (tile edges + random), fp32-accumulated reference on all
        rows = torch.cat([torch.tensor([0, 63, 64, 127, 128, M - 1], device="cuda").clamp(max=M - 1),
                          torch.randint(0, M, (250,), device="cuda")]).unique()
        err = rel_error(out[rows], reference(x[rows], w))
        torch.backends.cuda.matmul.allow_tf32 = True  # bf16 values are exact in tf32: exact products,
        h = x.float() @ w.float().t()                   # fp32 accumulation
        torch.backends.cuda.matmul.allow_tf32 = False
        ref32 = torch.nn.functional.silu(h[:, :N]) * h[:, N:]
        err32 = rel_error(out, ref32.double())
        err = max(err, err32)
        how = f"f64 {len(rows)} rows + fp32 whole"
    ok = unwritten == 0 and err <= TOL
    return ok, f"unwritten={unwritten} max_rel={err:.2e} ({how}, tol {TOL})"


def cmd_check(a) -> int:
    import torch
    rows = []
    for name in a.kernels:
        for variant in ("linked", "control"):
            g = load(name, variant == "control")
            bm, bn = g.block_m, g.block_n
            shapes = [(bm, bn, 64), (2 * bm, 3 * bn, 320), (512, 384, 1024), (1024, 1536, 2048)]
            shapes += [(M, INTER, HIDDEN) for M in a.qwen_m]
            for M, N, K in shapes:
                ok, msg = check_one(g, M, N, K)
                rows.append((name, variant, f"M={M} N={N} K={K}", ok, msg))
            if g.ragged:  # tiles cut by the tensor's edge: TMA zero-fills loads, clips stores
                for M, N, K in ((1, 8, 8), (200, 392, 328), (1000, 25600 - 8, HIDDEN), (129, 136, 72)):
                    ok, msg = check_one(g, M, N, K)
                    rows.append((name, variant, f"M={M} N={N} K={K}", ok, msg))
                x, w = inputs(bm, bn + 4, 64)
                rows.append((name, variant, "N % 8 refused", *expect(lambda: g(x, w), "R-SHAPE")))
            else:
                x, w = inputs(bm + 16, bn, 64)
                rows.append((name, variant, "ragged M refused", *expect(lambda: g(x, w), "R-SHAPE")))
            x, w = inputs(bm, bn, 64)
            rows.append((name, variant, "fp32 x refused", *expect(lambda: g(x.float(), w), "R-DTYPE")))
    bad = 0
    for r in rows:
        bad += not r[3]
        print(f"{'PASS' if r[3] else 'FAIL'}  {r[0]:<26} {r[1]:<8} {r[2]:<24} {r[4]}")
    print(f"check: {len(rows) - bad}/{len(rows)} passed")
    torch.cuda.synchronize()
    return 1 if bad else 0


# ---- timing -------------------------------------------------------------------------------

def inner_for(M: int) -> int:
    return 20 if M <= 512 else 6 if M <= 2048 else 3


def cmd_pair(a) -> int:
    import torch
    rows = []
    for M in a.m:
        x, w = inputs(M, INTER, HIDDEN)
        for name in a.kernels:
            gl, gc = load(name), load(name, True)
            if M % gl.block_m and not gl.ragged:
                continue
            ol = torch.empty((M, INTER), device="cuda", dtype=torch.bfloat16)
            oc = torch.empty_like(ol)
            # each kernel on its own output, then on the other's: where the output lies moved one
            # cubin against itself (BENCHMARKS.md, "Method")
            r, _, ta, tb, _, _ = both_ways_ratio((lambda: gl(x, w, ol), lambda: gc(x, w, oc)),
                                                 (lambda: gl(x, w, oc), lambda: gc(x, w, ol)), inner_for(M), a.rounds)
            rows.append((name, M, ta, tb, r))
            print(f"  {name:<26} M={M:<5} linked {ta:9.2f} us  control {tb:9.2f} us  linked/control {r:.4f}",
                  flush=True)
    worst = max(abs(r[4] - 1) for r in rows)
    print(f"pair: {len(rows)} configurations, geomean {statistics.geometric_mean([r[4] for r in rows]):.4f}, "
          f"worst |linked/control - 1| = {worst * 100:.3f}%")
    return 0


def cmd_bench(a) -> int:
    import torch
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    kernels = {n: (load(n), load(n, True)) for n in a.kernels}
    silu_mul = torch.compile(lambda g, u: F.silu(g) * u)
    whole = torch.compile(torch_swiglu)
    try:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    except Exception as e:  # noqa: BLE001
        print(f"liger-kernel not available ({e}); its column is skipped")
        LigerSiLUMulFunction = None
    copy_src = torch.empty(2**30, dtype=torch.uint8, device="cuda").random_(0, 255)
    copy_dst = torch.empty_like(copy_src)
    copy_us = interleaved({"copy": lambda: copy_dst.copy_(copy_src)}, 5, 20)["copy"]
    copy_tbs = 2 * copy_src.numel() / copy_us / 1e6
    print(f"device-to-device copy: {copy_tbs:.2f} TB/s (read + write, 1 GiB)")
    table = []
    for M in a.m:
        x, w = inputs(M, INTER, HIDDEN)
        wg, wu = w[:INTER], w[INTER:]
        outs = {}
        fns = {}
        best = None
        for n, (gl, gc) in kernels.items():
            if M % gl.block_m and not gl.ragged:
                continue
            outs[n] = torch.empty((M, INTER), device="cuda", dtype=torch.bfloat16)
            outs[n + ":control"] = torch.empty_like(outs[n])
            fns[n] = (lambda g=gl, o=outs[n]: g(x, w, o))
            fns[n + ":control"] = (lambda g=gc, o=outs[n + ":control"]: g(x, w, o))
        fns["cublas"] = lambda: x @ w.t()
        fns["cublas+eager"] = lambda: torch_swiglu(x, w)
        fns["cublas+compiled"] = lambda: silu_mul(*(x @ w.t()).split(INTER, dim=1))
        fns["compiled whole"] = lambda: whole(x, w)
        if LigerSiLUMulFunction is not None:
            fns["2xcublas+liger"] = lambda: LigerSiLUMulFunction.apply(x @ wg.t(), x @ wu.t())
        for n in fns:  # warm up / compile outside capture
            fns[n]()
        torch.cuda.synchronize()
        t = interleaved(fns, inner_for(M), a.rounds)
        ours = {n: v for n, v in t.items() if n in kernels}
        best = min(ours, key=ours.get)
        flop = 2 * M * 2 * INTER * HIDDEN
        row = {"M": M, "best": best, **{k: v for k, v in t.items()}}
        row["tflops_best"] = flop / t[best] / 1e6
        row["tflops_cublas"] = flop / t["cublas"] / 1e6
        row["speedup_vs_compiled"] = t["cublas+compiled"] / t[best]
        row["weights_tbs"] = (2 * INTER * HIDDEN * 2 + M * HIDDEN * 2 + M * INTER * 2) / t[best] / 1e6
        table.append(row)
        print(json.dumps(row), flush=True)
    cols = ["best", "best:control", "cublas", "cublas+eager", "cublas+compiled", "compiled whole", "2xcublas+liger"]
    print(f"\nQwen3-32B gate+up + SwiGLU, us per call (median over {a.rounds} interleaved rounds of graph replays)")
    print(f"{'M':>6} {'best fused':<22} " + " ".join(f"{c:>15}" for c in cols[1:]) +
          f" {'TFLOP/s':>8} {'vs compiled':>11}")
    for r in table:
        vals = [r[r["best"] + ":control"]] + [r.get(c, float("nan")) for c in cols[2:]]
        print(f"{r['M']:>6} {r['best']:<14}{r[r['best']]:8.1f} " + " ".join(f"{v:15.1f}" for v in vals) +
              f" {r['tflops_best']:8.0f} {r['speedup_vs_compiled']:11.3f}")
    g = statistics.geometric_mean([r["speedup_vs_compiled"] for r in table])
    print(f"geomean speedup over cuBLAS + torch.compile SwiGLU: {g:.3f}; min {min(r['speedup_vs_compiled'] for r in table):.3f}")
    r128 = next((r for r in table if r["M"] == 128), None)
    if r128:
        print(f"M=128: {r128['weights_tbs']:.2f} TB/s of compulsory bytes vs copy {copy_tbs:.2f} TB/s")
    if a.json:
        Path(a.json).write_text(json.dumps({"copy_tbs": copy_tbs, "rows": table}, indent=1))
    return 0


def cmd_sanitize(a) -> int:
    """compute-sanitizer memcheck/racecheck/synccheck on every linked kernel (a small problem
    through gpu_bench.py's torch-free `target`, which checks the result too)."""
    import subprocess
    san = sanitizer()
    if san is None:
        print("FAIL compute-sanitizer not found: the sanitizer gate cannot pass without it")
        return 1
    bad = 0
    for name in a.kernels:
        for tool in ("memcheck", "racecheck", "synccheck"):
            cmd = [san, "--tool", tool, "--error-exitcode", "9", "--print-limit", "10", sys.executable,
                   str(ROOT / "benchmarks" / "gpu_bench.py"), "target", "--kernel", "gemm_swiglu",
                   "--cubin", str(BIN / f"{name}.cubin"), "--manifest", str(BIN / f"{name}.manifest.json")]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            text = p.stdout + p.stderr
            summary = [ln for ln in text.splitlines() if "SUMMARY" in ln]
            ok = p.returncode == 0 and "RESULT OK" in text
            bad += not ok
            print(f"{'PASS' if ok else 'FAIL'}  {name:<26} {tool:<10} rc={p.returncode} {' '.join(summary)}")
            if not ok:
                print("    " + "\n    ".join(text.splitlines()[-25:]))
    print(f"sanitize: {3 * len(a.kernels) - bad}/{3 * len(a.kernels)} clean")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["check", "pair", "bench", "sanitize", "all"])
    ap.add_argument("--kernels", default="gemm_swiglu_tma,gemm_swiglu_tma_bn64,gemm_swiglu_tma_c2")
    ap.add_argument("--m", default=",".join(map(str, BENCH_M)))
    ap.add_argument("--qwen-m", default="128,1024,4096")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--json")
    a = ap.parse_args()
    a.m = parse_counts(ap, "--m", a.m)
    a.qwen_m = parse_counts(ap, "--qwen-m", a.qwen_m)
    a.kernels = [k for k in a.kernels.split(",") if k]
    missing = [f"{BIN / k}.manifest.json" for k in a.kernels if not (BIN / f"{k}.manifest.json").is_file()]
    if not a.kernels:
        ap.error("--kernels names no kernel (hint: e.g. --kernels gemm_swiglu_tma,gemm_swiglu_tma_pp)")
    if missing:
        ap.error(f"--kernels: not built: {', '.join(missing)} (hint: tools/bazel build //kernels/... "
                 "--output_groups=+control, or point PIPELINK_KERNELS_DIR at a directory of builds)")
    if not require_gpu(f"gemm_swiglu_bench.py {a.cmd}"):
        return 1
    return run_gates(a, {"check": cmd_check, "sanitize": cmd_sanitize, "pair": cmd_pair, "bench": cmd_bench})


if __name__ == "__main__":
    sys.exit(main())
