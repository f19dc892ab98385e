"""Baseline for issue 13: expert-parallel MoE layer in plain torch + NCCL all-to-all (the way a
user writes EP without a fused kernel), one process per GPU, and the same step with the EP
moe_step (kernels/moe/moe_ep.py) for comparison. NOT MEASURED ON SEVERAL GPUS YET: world > 1
needs the nvidia-h200-x2/x4/x8 kinds; nothing of this script has run on a GPU so far.

Per rank (T tokens, experts [r P, (r + 1) P), P = 128 / world): router (f32 softmax, top-8,
renormalized), slots sorted by expert (= by owner rank), all_to_all_single of the per-rank
slot counts (one host sync for the split sizes), all_to_all_single of the x rows, torch._grouped_mm
gate/up, SwiGLU, grouped down projection of the local experts, all_to_all_single back, weighted
index_add combine. Timed with CUDA events over eager steps (the split sizes need the host, so no
graph); the EP moe_step is timed as CUDA-graph replays of one opened session per rank.

    python benchmarks/moe_ep_baseline.py [WORLD] [T] [ITERS]     # WORLD default: all GPUs

NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1 are set for every rank).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

for _k, _v in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}.items():
    os.environ[_k] = _v
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "kernels" / "moe"), str(ROOT / "benchmarks")]
from gpu_bench import gpu_world, whole  # noqa: E402
E, H, I, TOP_K = 128, 2048, 768, 8


def ep_step(x, router_w, w13_r, w2_r, rank, world):
    """One EP MoE layer over NCCL: this rank's tokens in, this rank's outputs out (bf16)."""
    import torch
    import torch.distributed as dist
    P, T = E // world, x.shape[0]
    wv, ei = torch.softmax(x.float() @ router_w.float().t(), dim=1).topk(TOP_K, dim=1)
    wv = wv / wv.sum(1, keepdim=True)
    flat = ei.flatten()
    order = torch.argsort(flat, stable=True)           # by expert, hence by owner rank
    send_counts = torch.bincount(flat // P, minlength=world)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    sc, rc = send_counts.tolist(), recv_counts.tolist()  # host sync: the split sizes
    rows = torch.empty(sum(rc), H, dtype=x.dtype, device=x.device)
    dist.all_to_all_single(rows, x[order // TOP_K], rc, sc)
    experts = torch.empty(sum(rc), dtype=flat.dtype, device=x.device)
    dist.all_to_all_single(experts, flat[order], rc, sc)
    local = experts - rank * P
    perm = torch.argsort(local, stable=True)           # received rows grouped by local expert
    offs = torch.bincount(local, minlength=P).cumsum(0, dtype=torch.int32)
    h = torch._grouped_mm(rows[perm], w13_r.transpose(1, 2), offs=offs)
    y = torch._grouped_mm(torch.nn.functional.silu(h[:, :I]) * h[:, I:], w2_r.transpose(1, 2), offs=offs)
    back = torch.empty_like(y)
    back[perm] = y
    ys = torch.empty(T * TOP_K, H, dtype=y.dtype, device=x.device)
    dist.all_to_all_single(ys, back, sc, rc)
    out = torch.zeros(T, H, dtype=torch.float32, device=x.device)
    out.index_add_(0, order // TOP_K, ys.float() * wv.flatten()[order, None])
    return out.bfloat16()


def _time(fn, iters):
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters * 1e3  # us


def _rank_main(rank, world, T, iters, port):
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    g = torch.Generator(device="cuda").manual_seed(1234)  # same weights on every rank
    r = lambda *s, scale: (torch.randn(*s, generator=g, device="cuda") * scale).to(torch.bfloat16)  # noqa: E731
    rw, w13, w2 = r(E, H, scale=0.05), r(E, 2 * I, H, scale=0.02), r(E, H, I, scale=0.02)
    P = E // world
    w13_r, w2_r = w13[rank * P:(rank + 1) * P].contiguous(), w2[rank * P:(rank + 1) * P].contiguous()
    del w13, w2
    x = (torch.randn(T, H, device="cuda", generator=torch.Generator(device="cuda").manual_seed(rank)) ).bfloat16()
    res = {"nccl_all_to_all_us": _time(lambda: ep_step(x, rw, w13_r, w2_r, rank, world), iters)}
    try:
        from moe_ep import EpStep
        from pipelink.runtime.peers import UnixExchange
        ex = UnixExchange(f"moe-ep-baseline-{port}", world, rank)
        ep = EpStep(ex, max_tokens=T, device=rank)
        s = ep.open(x, rw, w13_r, w2_r)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            s.launch()
        dist.barrier()
        res["ep_moe_step_us"] = _time(graph.replay, iters)
        ref = ep_step(x, rw, w13_r, w2_r, rank, world)
        graph.replay()
        torch.cuda.synchronize()
        res["max_abs_diff_vs_baseline"] = (ref.float() - s.out.float()).abs().max().item()
        del graph
        ep.close()
        ex.close()
    except Exception as e:  # noqa: BLE001 - report, keep the baseline's number
        res["ep_moe_step"] = f"not run: {type(e).__name__}: {e}"
    print({"rank": rank, "world": world, "T": T, **res}, flush=True)
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("world", nargs="?", type=whole(1), help="ranks, one GPU each (default: every visible GPU)")
    ap.add_argument("T", nargs="?", type=whole(1), default=4096, help="tokens a rank (default %(default)s)")
    ap.add_argument("iters", nargs="?", type=whole(1), default=20, help="timed steps (default %(default)s)")
    a = ap.parse_args(argv)
    world = gpu_world(a.world, "moe_ep_baseline.py")
    if world is None:
        return 1
    import torch.multiprocessing as mp
    if E % world:
        ap.error(f"world {world}: a divisor of the {E} experts")
    mp.spawn(_rank_main, args=(world, a.T, a.iters, 29600 + os.getpid() % 1000), nprocs=world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
