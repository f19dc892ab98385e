"""Context-parallel causal attention over N ranks (issue 13): one process per rank.

    from pipelink.runtime.peers import UnixExchange
    from attention_cp import CpAttention, zigzag_shard, zigzag_unshard
    ex = UnixExchange("job42", world=N, rank=r)
    cp = CpAttention(ex, B=1, H=32, seq_len=32768, device=0)   # opens the symmetric K/V buffer
    q_r, k_r, v_r = (zigzag_shard(t, N, r) for t in (q, k, v))  # [B, H, 2C, 128] each
    o_r = cp(q_r, k_r, v_r)        # this rank's rows of causal attention over the whole sequence
    ...; cp.close(); ex.close()

The sequence is cut into 2N chunks of C = S / (2N) rows (zigzag, attn_cp.h): rank r holds chunks
r and 2N-1-r. `cp(...)` copies k_r, v_r into this rank's region of a peer-mapped symmetric
buffer (pipelink.runtime.peers) and launches //kernels/attention:attn_cp: the communication loader
attn_cp_loader reads every rank's K/V blocks from that rank's region (ring order r, r-1, ...),
after its READY counter shows the launch's epoch, into the unchanged attn_core. Before the
copy, the stream waits until every rank finished reading the previous launch's K/V (DONE
counters; cuStreamWaitValue32). Every rank must call it the same number of times.
A CUDA graph of `cp(...)` would bake the DONE value it waits for (replays would not wait for the
peers): capture only `cp(q)` with K/V written into `cp.k_local` / `cp.v_local` by the caller after
its own wait, or leave it eager (open; needs the DONE epoch on the device).
Errors: LaunchError / PeerError with R-* codes and hints, before anything is launched:
B, H ints >= 1 and B*H*2C*2 + flags rows < 2^31 (R-SHAPE); device a GPU index (R-DEVICE);
q [B, H, 2C, 128] bf16 16-byte aligned, k, v the same shape or None (the tensor checks of
pipelink.runtime.entry: R-PARAM, R-SHAPE, R-DTYPE, R-DEVICE, R-LAYOUT); scale a finite float32 > 0
(R-PARAM); out of q's shape, sharing memory with neither q, k, v nor the symmetric K/V buffer
(R-LAYOUT: the peers read that buffer while the kernel writes out); q must not lie in the
K/V buffer when k or v is copied in (R-LAYOUT); stream a stream (R-PARAM).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

try:
    from pipelink.runtime.peers import PeerError
    from pipelink.runtime.peers_cuda import SymmetricBuffer
    from pipelink.runtime import Kernel, LaunchError
except ImportError:  # run from a checkout without PYTHONPATH=tools
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from pipelink.runtime.peers import PeerError
    from pipelink.runtime.peers_cuda import SymmetricBuffer
    from pipelink.runtime import Kernel, LaunchError
from pipelink.runtime.entry import (device_index, expect_disjoint, expect_stream, expect_tensor, flag, integer,
                            optional_dir, real)

BLOCK, HEAD_DIM, ROW_BYTES, PARTIAL = 128, 128, 256, 1 << 31
READY, DONE, FLAG_WORDS = 0, 64, 256  # attn_cp.h
FLAG_ROWS = FLAG_WORDS * 4 // ROW_BYTES


def chunk_rows(seq_len: int, world: int) -> int:
    """C = S / (2 world), which must be a positive multiple of 128 (R-SHAPE)."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0 or seq_len % (2 * world * BLOCK):
        raise LaunchError("R-SHAPE", f"sequence length {seq_len!r} is not a positive multiple of 2 * world * "
                          f"{BLOCK} = {2 * world * BLOCK}",
                          hint="zigzag context parallelism cuts the sequence into 2 * world chunks of whole 128-row blocks")
    return seq_len // (2 * world)


def zigzag_shard(x, world: int, rank: int, dim: int = 2):
    """Rank `rank`'s local rows of a global tensor: chunks rank and 2 world - 1 - rank."""
    import torch
    c = chunk_rows(x.shape[dim], world)
    lo = x.narrow(dim, rank * c, c)
    hi = x.narrow(dim, (2 * world - 1 - rank) * c, c)
    return torch.cat([lo, hi], dim=dim).contiguous()


def zigzag_unshard(parts, dim: int = 2):
    """The global tensor from every rank's local rows (inverse of zigzag_shard)."""
    import torch
    world = len(parts)
    c = parts[0].shape[dim] // 2
    chunks = [None] * (2 * world)
    for r, p in enumerate(parts):
        chunks[r], chunks[2 * world - 1 - r] = p.narrow(dim, 0, c), p.narrow(dim, c, c)
    return torch.cat(chunks, dim=dim)


def visit_table(world: int, rank: int, C: int) -> list[int]:
    """The KV blocks each local Q block visits, in ring order of their owners (attn_cp.h): per
    local block, [count, global block | PARTIAL on the diagonal, ...], rows of 1 + S/128 words."""
    cb, n2 = C // BLOCK, 2 * world
    row = 1 + n2 * cb
    out = []
    for lb in range(2 * cb):
        gq = rank * cb + lb if lb < cb else (n2 - 1 - rank) * cb + (lb - cb)
        visits = []
        for step in range(world):
            s = (rank - step) % world
            for c in (s, n2 - 1 - s):
                last = cb - 1 if c < gq // cb else gq % cb if c == gq // cb else -1
                visits += [c * cb + i | (PARTIAL if c * cb + i == gq else 0) for i in range(last + 1)]
        out += [len(visits)] + visits + [0] * (row - 1 - len(visits))
    return out


class _DeviceArray:
    def __init__(self, ptr, shape, typestr):
        self.__cuda_array_interface__ = {"data": (int(ptr), False), "shape": tuple(shape), "typestr": typestr,
                                         "version": 3, "strides": None}


class CpAttention:
    """One rank's context-parallel causal attention for fixed B, H and global sequence length."""

    def __init__(self, exchange, *, B: int, H: int, seq_len: int, device: int = 0, kernel_dir=None,
                 control: bool = False):
        import torch
        self.world, self.rank = exchange.world, exchange.rank
        B, H = (integer(n, x, 1, 2**31 - 1, code="R-SHAPE", hint=f"{n}: an int >= 1") for n, x in (("B", B), ("H", H)))
        self.B, self.H, self.S = B, H, seq_len
        self.C = chunk_rows(seq_len, self.world)
        if 2 * B * H * 2 * self.C + FLAG_ROWS >= 2**31:
            raise LaunchError("R-SHAPE", f"B*H*2C = {B * H * 2 * self.C} local rows: K, V and the flags pass 2^31 rows "
                              "(TMA coordinates)", hint="use fewer heads or a shorter sequence per launch")
        self.L = 2 * self.C  # local rows
        self.bh = B * H
        kv_rows = 2 * self.bh * self.L
        self.flags_row = kv_rows
        self.device = device_index(device)
        d = optional_dir("kernel_dir", kernel_dir) or _kernel_dir_default()
        control = flag("control", control)
        self.kernel = Kernel.load(d / f"attn_cp{'.control' if control else ''}.cubin", d / "attn_cp.manifest.json",
                                  self.device)
        self.buf = SymmetricBuffer.open((kv_rows + FLAG_ROWS) * ROW_BYTES, world=self.world, rank=self.rank,
                                        exchange=exchange, device=self.device)
        self.stride_rows = self.buf.stride // ROW_BYTES
        if self.world * self.stride_rows >= 2**31:
            self.buf.close()
            raise LaunchError("R-SHAPE", "the K/V window has more than 2^31 rows (TMA coordinates)",
                              hint="use fewer heads or a shorter sequence per launch")
        dev = torch.device("cuda", self.device)
        region = torch.as_tensor(_DeviceArray(self.buf.local, (self.buf.stride // 2,), "<i2"), device=dev)
        kv = region[: 2 * self.bh * self.L * HEAD_DIM].view(torch.bfloat16).view(2, B, H, self.L, HEAD_DIM)
        self.k_local, self.v_local = kv[0], kv[1]  # this rank's region: write K/V here (or pass them to __call__)
        self.flags = region[self.flags_row * ROW_BYTES // 2:][: FLAG_WORDS * 2].view(torch.int32)
        words = [self.world, self.rank, self.C, self.bh, self.stride_rows, self.flags_row, self.L // BLOCK,
                 1 + self.S // BLOCK] + visit_table(self.world, self.rank, self.C)
        self.aux = torch.tensor([w - 2**32 if w >= 2**31 else w for w in words], dtype=torch.int32, device=dev)
        self.launches = 0

    def check_call(self, q, k=None, v=None, *, scale=None, out=None, stream=None) -> float:
        """Every check of one call (no CUDA call) -> the scale."""
        import torch
        shape = (self.B, self.H, self.L, HEAD_DIM)
        expect_tensor("q", q, shape=shape, dtype=torch.bfloat16, device=self.device, align=16)
        for name, t in (("k", k), ("v", v)):
            if t is not None:
                expect_tensor(name, t, shape=shape, dtype=torch.bfloat16, device=self.device)
        scale = 1.0 / math.sqrt(HEAD_DIM) if scale is None else real("scale", scale, positive=True,
                                                                     hint="default: 1/sqrt(d)")
        region = (self.device, self.buf.local, self.buf.local + self.buf.stride)  # this rank's K/V and flags
        if k is not None or v is not None:
            expect_disjoint("q", q, {"the symmetric K/V buffer (k and v are copied into it first)": region})
        if out is not None:
            expect_tensor("out", out, shape=shape, dtype=torch.bfloat16, device=self.device, align=16)
            expect_disjoint("out", out, {"q": q, "k": k, "v": v, "the symmetric K/V buffer": region})
        expect_stream(stream)
        return scale

    def __call__(self, q, k=None, v=None, *, scale: float | None = None, out=None, stream=None):
        import torch
        scale = self.check_call(q, k, v, scale=scale, out=out, stream=stream)
        if out is None:
            out = torch.empty_like(q)
        s = stream if stream is not None else torch.cuda.current_stream(self.device)
        if k is not None or v is not None:
            if self.launches:
                self.wait_peers_done(s)  # nobody still reads the K/V we are about to overwrite
            with torch.cuda.stream(s):
                if k is not None:
                    self.k_local.copy_(k)
                if v is not None:
                    self.v_local.copy_(v)
        self.kernel.launch_with({"q": q, "kv": self.buf.window, "aux": self.aux, "o": out, "q_len": self.L,
                                 "kv_len": self.L, "bh": self.bh, "world": self.world, "rank": self.rank,
                                 "stride_rows": self.stride_rows, "flags_row": self.flags_row,
                                 "scale": float(scale)}, stream=s)
        self.launches += 1
        return out

    def wait_peers_done(self, stream) -> None:
        """Make `stream` wait until every rank has finished reading this rank's K/V of every
        launch so far (DONE counters >= launches)."""
        from cuda.bindings import driver as drv
        h = drv.CUstream(int(stream.cuda_stream) if hasattr(stream, "cuda_stream") else int(stream))
        base = self.buf.local + self.flags_row * ROW_BYTES
        for s in range(self.world):
            err, = drv.cuStreamWaitValue32(h, base + 4 * (DONE + s), self.launches,
                                           drv.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ)
            if err != drv.CUresult.CUDA_SUCCESS:
                raise PeerError("R-PEER", f"cuStreamWaitValue32 on rank {s}'s DONE counter failed: {err.name}",
                                hint="this GPU or driver does not support stream memory waits")

    def close(self) -> None:
        import torch
        torch.cuda.synchronize(self.device)
        self.k_local = self.v_local = self.flags = None
        self.buf.close()


def _kernel_dir_default() -> Path:
    import os
    d = os.environ.get("PIPELINK_ATTENTION_DIR")
    return Path(d) if d else Path(__file__).resolve().parents[2] / "bazel-bin" / "kernels" / "attention"
