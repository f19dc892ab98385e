"""Baseline for issue 13: zigzag ring attention in plain torch + NCCL (causal prefill), one
process per GPU. Per ring step, each rank computes its two local Q chunks against the K/V chunks
it holds with torch's flash SDPA (log-sum-exp merge), while NCCL isend/irecv passes the K/V on
to rank r+1. NOT MEASURED ON SEVERAL GPUS YET: only world = 1 ran (one H200); world > 1 needs
the nvidia-h200-x2/x4 kinds.

    python benchmarks/ring_attention_baseline.py [WORLD] [S] [H]    # WORLD default: all GPUs

NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1 are set for every rank).
"""

from __future__ import annotations

import argparse
import os
import sys

for _k, _v in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}.items():
    os.environ[_k] = _v

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_bench import gpu_world, whole  # noqa: E402


def _flash(q, k, v, causal):
    import torch
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)[:2]
    return out.float(), lse.float()  # lse: [B, H, L], natural log


def _merge(acc, part):
    import torch
    if acc is None:
        return part
    (o1, l1), (o2, l2) = acc, part
    l = torch.logaddexp(l1, l2)
    return o1 * torch.exp(l1 - l)[..., None] + o2 * torch.exp(l2 - l)[..., None], l


def ring_attention(ql, kl, vl, rank, world, group=None):
    """Causal attention of this rank's zigzag rows ql [B, H, 2C, d] over the whole sequence."""
    import torch
    import torch.distributed as dist
    C = ql.shape[2] // 2
    qs = [(rank, ql[:, :, :C]), (2 * world - 1 - rank, ql[:, :, C:])]
    acc = [None, None]
    kv = torch.stack([kl, vl])
    for step in range(world):
        src = (rank - step) % world
        nxt = None
        if step + 1 < world:  # pass what we hold to rank+1, receive rank-1's
            buf = torch.empty_like(kv)
            ops = [dist.P2POp(dist.isend, kv, (rank + 1) % world, group), dist.P2POp(dist.irecv, buf, (rank - 1) % world, group)]
            nxt = (dist.batch_isend_irecv(ops), buf)
        for kc, sl in ((src, slice(0, C)), (2 * world - 1 - src, slice(C, 2 * C))):
            for j, (qc, q) in enumerate(qs):
                if kc > qc:
                    continue
                acc[j] = _merge(acc[j], _flash(q, kv[0][:, :, sl], kv[1][:, :, sl], kc == qc))
        if nxt is not None:
            for w in nxt[0]:
                w.wait()
            kv = nxt[1]
    return torch.cat([acc[0][0], acc[1][0]], dim=2).to(ql.dtype)


def _rank_main(rank, world, S, H, port):
    import torch
    import torch.distributed as dist
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "kernels", "attention"))
    from attention_cp import zigzag_shard
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    g = torch.Generator(device="cuda").manual_seed(5)
    q, k, v = (torch.randn(1, H, S, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    ql, kl, vl = (zigzag_shard(x, world, rank) for x in (q, k, v))
    out = ring_attention(ql, kl, vl, rank, world)
    ref = zigzag_shard(torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
                       if S <= 8192 else torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).float(),
                       world, rank)
    rel = ((out.float() - ref).norm() / ref.norm()).item()
    for _ in range(3):
        ring_attention(ql, kl, vl, rank, world)
    torch.cuda.synchronize()
    dist.barrier()
    times = []
    for _ in range(10):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        ring_attention(ql, kl, vl, rank, world)
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1))
    ms = sorted(times)[len(times) // 2]
    flops = 4 * S * S * 128 * H / 2
    print(f"rank {rank}/{world} S={S} H={H}: ring (torch flash + NCCL) {ms:.3f} ms, {flops / world / ms / 1e9:.0f} "
          f"TFLOP/s per GPU, rel err vs reference {rel:.2e}", flush=True)
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("world", nargs="?", type=whole(1), help="ranks, one GPU each (default: every visible GPU)")
    ap.add_argument("S", nargs="?", type=whole(1), default=32768, help="sequence length (default %(default)s)")
    ap.add_argument("H", nargs="?", type=whole(1), default=32, help="heads (default %(default)s)")
    a = ap.parse_args(argv)
    world = gpu_world(a.world, "ring_attention_baseline.py")
    if world is None:
        return 1
    import torch.multiprocessing as mp
    if a.S % (2 * world):
        ap.error(f"S {a.S}: a multiple of 2 x world = {2 * world} (the zigzag shards' chunks)")
    mp.spawn(_rank_main, args=(world, a.S, a.H, 29500 + os.getpid() % 1000), nprocs=world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
