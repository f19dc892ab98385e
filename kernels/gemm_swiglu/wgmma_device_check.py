"""GPU check of the wgmma GEMM + SwiGLU (gemm_swiglu_wgmma) against torch, with timings
next to the mma.sync composition (gemm_swiglu) and cuBLAS. Runs on the GPU machine over a
benchmarks/build_artifacts.sh folder (carried; nothing is linked there).

  python3 kernels/gemm_swiglu/wgmma_device_check.py --artifacts .wgbuild [--reps 20]

Correctness: fresh random bf16 inputs (x in [-1, 1), w scaled by 2/sqrt(K)), output poisoned
with 0xFFFF (a bf16 NaN) so unwritten elements show, compared with a float32 reference of
the same bf16 inputs: max over elements of |out - ref| / (|ref| + 0.01 * rms(ref)) <= 2e-2
(the gpu_bench.py tolerance), and the relative Frobenius error. Timing: CUDA events around
each launch, median over --reps launches after 3 warm-ups, per shape: each linked wgmma
config, each linked mma.sync config, cuBLAS matmul alone and cuBLAS + eager SwiGLU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "kernels" / "gemm_swiglu"))

CHECK_SHAPES = [(256, 256, 512), (128, 25600, 5120), (1024, 25600, 5120)]  # (M, N, K)
BENCH_SHAPES = [(128, 25600, 5120), (1024, 25600, 5120)]  # Qwen3-32B MLP gate+up: w [51200, 5120]
TOL = 2e-2


def inputs(M, N, K, seed):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.rand(M, K, device="cuda", generator=g) * 2 - 1).bfloat16()
    w = ((torch.rand(2 * N, K, device="cuda", generator=g) * 2 - 1) * (2 / K**0.5)).bfloat16()
    return x, w


def error(out, x, w):
    import torch
    import torch.nn.functional as F
    N = w.shape[0] // 2
    h = x.float() @ w.float().t()  # f32 reference of the bf16 inputs (no TF32: torch's default)
    ref = F.silu(h[:, :N]) * h[:, N:]
    unwritten = int(torch.isnan(out).sum())
    o = out.float()
    rms = ref.pow(2).mean().sqrt()
    rel = ((o - ref).abs() / (ref.abs() + 1e-2 * rms)).nan_to_num(0.0)
    fro = float((o - ref).nan_to_num(0.0).norm() / ref.norm())
    return unwritten, float(rel.max()), fro


def time_fn(fn, reps):
    import torch
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ev = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        ev.append((e0, e1))
    torch.cuda.synchronize()
    return statistics.median(e0.elapsed_time(e1) for e0, e1 in ev)  # ms


def main() -> int:
    import torch
    import torch.nn.functional as F
    from gemm_swiglu import GemmSwiglu

    ap = argparse.ArgumentParser()
    ap.add_argument("--artifacts", type=Path, default=ROOT / ".wgbuild")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--configs", default="128x64x64_dfree,128x128x64_dfree")
    ap.add_argument("--mma-configs", default=None,
                    help="gemm_swiglu (mma.sync) configs to time alongside (default: --configs)")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    index = json.loads((a.artifacts / "index.json").read_text())["configs"]
    by_name = {c["name"]: c for c in index}

    def load(kernel, cfg):
        c = by_name.get(f"{kernel}/{cfg}")
        if c is None:
            return None
        d = a.artifacts / c["dir"]
        return GemmSwiglu(d / c["linked"], d / c["manifest"])

    cfgs = a.configs.split(",")
    wg = {cfg: load("gemm_swiglu_wgmma", cfg) for cfg in cfgs}
    ms = {cfg: load("gemm_swiglu", cfg) for cfg in (a.mma_configs or a.configs).split(",")}
    for cfg, g in wg.items():
        print(f"wgmma {cfg}: {g!r} registers={g.kernel.registers}", flush=True)
    results = {"check": [], "bench": []}
    bad = 0
    print("== correctness (wgmma, linked)", flush=True)
    for M, N, K in CHECK_SHAPES:
        x, w = inputs(M, N, K, seed=M * 7 + N * 3 + K)
        for cfg, g in wg.items():
            if g is None:
                continue
            out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            out.view(torch.int16).fill_(-1)  # 0xFFFF: bf16 NaN
            g(x, w, out)
            torch.cuda.synchronize()
            unwritten, rel, fro = error(out, x, w)
            ok = unwritten == 0 and rel <= TOL
            bad += not ok
            print(f"{'PASS' if ok else 'FAIL'} wgmma {cfg:<18} M={M} N={N} K={K}: max_rel={rel:.3e} "
                  f"fro_rel={fro:.3e} unwritten={unwritten}", flush=True)
            results["check"].append(dict(cfg=cfg, M=M, N=N, K=K, max_rel=rel, fro_rel=fro, unwritten=unwritten, ok=ok))
        del x, w
        torch.cuda.empty_cache()

    print(f"== timing: CUDA events, median of {a.reps} launches", flush=True)
    for M, N, K in BENCH_SHAPES:
        x, w = inputs(M, N, K, seed=1)
        flops = 2 * M * 2 * N * K
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        variants = []
        for cfg, g in wg.items():
            if g is not None:
                variants.append((f"wgmma {cfg}", lambda g=g: g(x, w, out)))
        for cfg, g in ms.items():
            if g is not None:
                variants.append((f"mma.sync {cfg}", lambda g=g: g(x, w, out)))
        variants.append(("cuBLAS matmul only", lambda: x @ w.t()))

        def eager():
            h = x @ w.t()
            return F.silu(h[:, :N]) * h[:, N:]
        variants.append(("cuBLAS + eager SwiGLU", eager))
        print(f"-- M={M} N={N} K={K} ({flops / 1e9:.0f} GFLOP)", flush=True)
        for name, fn in variants:
            t = time_fn(fn, a.reps)
            print(f"   {name:<28} {t * 1e3:9.1f} us  {flops / (t * 1e-3) / 1e12:7.1f} TFLOP/s", flush=True)
            results["bench"].append(dict(variant=name, M=M, N=N, K=K, median_ms=t, tflops=flops / (t * 1e-3) / 1e12))
        del x, w, out
        torch.cuda.empty_cache()
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    print("wgmma device check:", "PASS" if bad == 0 else f"{bad} FAILED", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
