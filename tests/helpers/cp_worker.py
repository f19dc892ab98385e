"""One rank of the multi-process GPU tests (tests/runtime/test_peers.py, tests/kernels/test_attention_cp.py);
started once per rank by `run_ranks`, prints one JSON line.

    python tests/helpers/cp_worker.py peers WORLD RANK NAME
    python tests/helpers/cp_worker.py attn WORLD RANK NAME S H SEED [KERNEL_DIR]
    python tests/helpers/cp_worker.py moe WORLD RANK NAME T SEED [KERNEL_DIR]   (tests/helpers/moe_ep_worker.py)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "kernels" / "attention")]
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def run_ranks(mode: str, world: int, name: str, *args, timeout: float | None = None, prefix=()) -> list[dict]:
    """Start `world` worker processes (optionally under `prefix`, e.g. compute-sanitizer) and
    return each rank's JSON result; a rank that fails or hangs fails the whole run."""
    timeout = timeout or float(os.environ.get("PIPELINK_RANKS_TIMEOUT", "300"))
    env = {**os.environ, **MULTICAST_OFF, "PYTHONUNBUFFERED": "1"}
    procs = [subprocess.Popen([*prefix, sys.executable, __file__, mode, str(world), str(r), name, *map(str, args)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(world)]
    out = []
    try:
        for r, p in enumerate(procs):
            try:
                so, se = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                so, se = p.communicate()
                raise AssertionError(f"rank {r} did not finish in {timeout:.0f} s:\n{so[-2000:]}\n{se[-4000:]}") from None
            lines = [ln for ln in so.splitlines() if ln.startswith("{")]
            assert p.returncode == 0 and lines, f"rank {r} exited {p.returncode}:\n{so[-2000:]}\n{se[-4000:]}"
            out.append({**json.loads(lines[-1]), "log": so[-4000:] + se[-4000:]})
    finally:
        for p in procs:  # only the processes started here
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def peers(world: int, rank: int, name: str) -> dict:
    import torch
    from cuda.bindings import driver as drv

    from pipelink.runtime.peers import UnixExchange
    from pipelink.runtime.peers_cuda import SymmetricBuffer, peer_table
    torch.cuda.init()
    ex = UnixExchange(name, world, rank)
    nbytes = 3 * 1024 * 1024 + 12  # not a multiple of the granularity
    buf = SymmetricBuffer.open(nbytes, world=world, rank=rank, exchange=ex, device=0)
    sync = SymmetricBuffer.open(4096, world=world, rank=rank, exchange=ex, device=0)
    words = nbytes // 4
    mine = torch.as_tensor(_Arr(buf.local, words), device="cuda")
    mine.copy_(torch.arange(words, device="cuda", dtype=torch.int32) * 7 + rank * 1000003)
    torch.cuda.synchronize()
    ex.barrier()  # every rank wrote its buffer
    res = {"rank": rank, "stride": buf.stride, "ok": True, "errors": []}
    for s in range(world):
        view = torch.as_tensor(_Arr(buf.peer(s), words), device="cuda")  # a kernel reads the peer's memory
        want = torch.arange(words, device="cuda", dtype=torch.int32) * 7 + s * 1000003
        if not torch.equal(view, want):
            res["ok"] = False
            res["errors"].append(f"rank {s}'s buffer differs as read by a kernel")
        host = bytearray(16)  # and a copy engine read of the last words
        err, = drv.cuMemcpyDtoH(host, buf.peer(s) + nbytes - 16, 16)
        got = [int.from_bytes(host[i:i + 4], "little", signed=True) for i in range(0, 16, 4)]
        if err != drv.CUresult.CUDA_SUCCESS or got != want[-4:].tolist():
            res["ok"] = False
            res["errors"].append(f"cuMemcpyDtoH of rank {s}: {err} {got}")
    t = peer_table([buf, sync])
    table = torch.as_tensor(_Arr(t.ptr, 2 * world, "<i8"), device="cuda").cpu().tolist()
    want = [a for s in range(world) for a in (buf.peer(s), sync.peer(s))]
    if [x & (2**64 - 1) for x in table] != want:
        res["ok"] = False
        res["errors"].append(f"peer table {table} != {want}")
    ex.barrier()  # nobody reads any more
    t.close()
    sync.close()
    buf.close()
    ex.close()
    return res


def attn(world: int, rank: int, name: str, S: int, H: int, seed: int, kernel_dir: str | None = None) -> dict:
    import torch

    from attention_cp import CpAttention, zigzag_shard
    from pipelink.runtime.peers import UnixExchange
    torch.cuda.init()
    ex = UnixExchange(name, world, rank)
    cp = CpAttention(ex, B=1, H=H, seq_len=S, device=0, kernel_dir=kernel_dir)
    res = {"rank": rank, "errors": [], "rel": []}
    outs = []
    for step in range(3):  # fresh K/V each step: epochs, READY and DONE counters advance
        g = torch.Generator(device="cuda").manual_seed(seed + step)
        q, k, v = (torch.randn(1, H, S, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        ql, kl, vl = (zigzag_shard(x, world, rank) for x in (q, k, v))
        out = torch.full_like(ql, float("nan"))
        cp(ql, kl, vl, out=out)
        torch.cuda.synchronize()
        ref = zigzag_shard(_reference(q, k, v), world, rank)
        rel = ((out.float() - ref).norm() / ref.norm()).item()
        res["rel"].append(rel)
        if not torch.isfinite(out).all() or not rel < 2e-2:
            res["errors"].append(f"step {step}: rel err {rel:.3e}, finite {bool(torch.isfinite(out).all())}")
        outs.append((q, k, v, out))
    if world == 1:  # the single-GPU kernel on the same inputs
        from attention import attention
        q, k, v, out = outs[-1]
        single = attention(q, k, v, variant="causal", kernel_dir=kernel_dir)
        torch.cuda.synchronize()
        res["vs_single_max_abs"] = (single.float() - out.float()).abs().max().item()
    flags = cp.flags.cpu().tolist()
    res["ready"], res["done"] = flags[0:world], flags[64:64 + world]
    ex.barrier()
    cp.close()
    ex.close()
    return res


def _reference(q, k, v):
    import torch
    S = q.shape[2]
    s = torch.einsum("bhqd,bhkd->bhqk", q.float(), k.float()) / 128 ** 0.5
    mask = torch.ones(S, S, dtype=torch.bool, device=q.device).tril()
    return torch.einsum("bhqk,bhkd->bhqd", torch.softmax(s.masked_fill(~mask, float("-inf")), -1), v.float())


class _Arr:
    def __init__(self, ptr, n, typestr="<i4"):
        self.__cuda_array_interface__ = {"data": (int(ptr), False), "shape": (n,), "typestr": typestr, "version": 3}


if __name__ == "__main__":
    mode, world, rank, name, *rest = sys.argv[1:]
    if mode == "moe":
        sys.path.insert(0, str(ROOT / "tests"))
        from helpers.moe_ep_worker import moe
    fn = {"peers": peers, "attn": attn, "moe": moe if mode == "moe" else None}[mode]
    r = fn(int(world), int(rank), name, *[int(x) if x.lstrip("-").isdigit() else x for x in rest])
    print(json.dumps(r))
    sys.exit(0 if not r.get("errors") else 1)
