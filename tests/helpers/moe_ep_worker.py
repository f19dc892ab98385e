"""One rank of the expert-parallel moe_step GPU test (tests/kernels/test_moe_ep.py), started by
cp_worker.run_ranks("moe", world, name, T, seed, kernel_dir): prints one JSON line.

Every rank builds the same global inputs (seeded), runs its own T tokens with its experts'
weights only, and checks its rows against the f64 single-GPU reference on the union of all
ranks' tokens, and against the single-GPU kernel (world 1) on that union. Launches: two eager
steps with fresh tokens, then one opened session captured in a CUDA graph and replayed twice
with fresh tokens copied into its input; outputs NaN-poisoned before each launch.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "kernels" / "moe")]


def _inputs(torch, T, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s, scale: (torch.randn(*s, generator=g, device="cuda") * scale).to(torch.bfloat16)  # noqa: E731
    return r(T, 2048, scale=1.0), r(128, 2048, scale=0.05), r(128, 1536, 2048, scale=0.02), r(128, 2048, 768, scale=0.02)


def moe(world: int, rank: int, name: str, T: int, seed: int, kernel_dir: str | None = None,
        mode: str = "check") -> dict:
    import torch

    import moe_step as ms
    from moe_ep import EpStep
    from pipelink.runtime.peers import UnixExchange
    torch.cuda.init()
    kd = kernel_dir if kernel_dir and kernel_dir != "-" else None
    ex = UnixExchange(name, world, rank)
    _, rw, w13, w2 = _inputs(torch, 1, seed)
    P = 128 // world
    w13_r, w2_r = w13[rank * P:(rank + 1) * P].contiguous(), w2[rank * P:(rank + 1) * P].contiguous()
    ep = EpStep(ex, max_tokens=T, kernel_dir=kd)
    res = {"rank": rank, "errors": [], "max_err": [], "vs_single": [], "ok_frac": []}

    def check(step, x_all, out):
        torch.cuda.synchronize()
        mine = slice(rank * T, (rank + 1) * T)
        ref, gap = ms.reference(x_all, rw, w13, w2)
        ref, gap = ref[mine], gap[mine]
        ok = gap > 1e-4
        err = (out.double() - ref).abs()
        bad = (err > 2e-2 + 2e-2 * ref.abs())[ok]
        single = ms.moe_step(x_all, rw, w13, w2, kernel_dir=kd)[mine]
        torch.cuda.synchronize()
        res["max_err"].append(err[ok].max().item() if ok.any() else 0.0)
        res["ok_frac"].append(ok.float().mean().item())
        res["vs_single"].append((single.float() - out.float()).abs()[ok].max().item() if ok.any() else 0.0)
        if torch.isnan(out).any():
            res["errors"].append(f"step {step}: NaN (unwritten) output rows")
        if bad.any():
            res["errors"].append(f"step {step}: {int(bad.sum())} elements off, max err {res['max_err'][-1]:.3e}")

    step = 0
    for _ in range(2):  # eager launches, fresh tokens each (generation / launch parity advances)
        x_all = _inputs(torch, world * T, seed + 100 + step)[0]
        x = x_all[rank * T:(rank + 1) * T].contiguous()
        out = torch.full((T, 2048), float("nan"), dtype=torch.bfloat16, device="cuda")
        ep(x, rw, w13_r, w2_r, out)
        check(step, x_all, out)
        step += 1
    x = torch.empty(T, 2048, dtype=torch.bfloat16, device="cuda")
    s = ep.open(x, rw, w13_r, w2_r)
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.graph(graph, stream=stream):
        s.launch(stream=stream.cuda_stream)
    for _ in range(2):  # replays: no memset, no host work
        x_all = _inputs(torch, world * T, seed + 100 + step)[0]
        x.copy_(x_all[rank * T:(rank + 1) * T])
        s.out.fill_(float("nan"))
        torch.cuda.synchronize()
        graph.replay()
        check(step, x_all, s.out)
        step += 1
    res["launches"] = step
    del graph
    ep.close()
    ex.close()
    return res
