"""Expert-parallel moe_step over N ranks (issue 13): one process per rank, each with its GPU.

    from pipelink.runtime.peers import UnixExchange
    from moe_ep import EpStep
    ex = UnixExchange("job42", world=N, rank=r)
    ep = EpStep(ex, max_tokens=4096, device=0)         # opens the peer-mapped workspaces
    out_r = ep(x_r, router_w, w13_r, w2_r)             # this rank's tokens, its experts' weights
    s = ep.open(x_r, router_w, w13_r, w2_r, out_r)     # or plan once; s.launch() is graph-capturable
    ...; ep.close(); ex.close()

The same linked kernel as `moe_step` (//kernels:moe_step), launched with world = N: rank r
owns experts [r P, (r + 1) P), P = 128 / N (N in 1, 2, 4, 8). Each rank routes its own tokens
(router_w [128, 2048] on every rank); the count exchange, the rows sent to the experts'
owners, and the combine's reads of their outputs all run inside the kernel over the `sync`,
`xs` and `ys` workspaces, which this class lends from `pipelink.runtime.peers` symmetric buffers
(`hs` stays local, lent for N * max_tokens rows). Weights: w13 [P, 1536, 2048] and
w2 [P, 2048, 768] of this rank's experts (or the full [128, ...] tensors, of which only this
rank's experts are read). Every rank must launch the same number of times (eagerly or by
graph replays): the exchange of launch E waits for every rank's launch E.
NVLink multicast stays off: nothing here uses NCCL or multicast objects.
Errors: LaunchError / PeerError with R-* codes (R-RANK, R-PEER, R-SHAPE, R-DTYPE, R-DEVICE,
R-LAYOUT, R-WORKSPACE, R-PARAM, R-MANIFEST) and hints, before any launch: the tensor checks of
moe_step.check_inputs (an `out` sharing memory with an input is R-LAYOUT), max_tokens an int
in 1 .. 65536 (numpy ints too, never a bool or float), device a GPU index.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from pipelink.runtime.peers import PeerError, check_world
    from pipelink.runtime.peers_cuda import SymmetricBuffer, peer_table
    from pipelink.runtime import LaunchError
except ImportError:  # run from a checkout without PYTHONPATH=tools
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from pipelink.runtime.peers import PeerError, check_world
    from pipelink.runtime.peers_cuda import SymmetricBuffer, peer_table
    from pipelink.runtime import LaunchError
from pipelink.runtime.entry import device_index, expect_disjoint, expect_stream, expect_tensor, integer

from moe_step import BIAS_PARAMS, EXPERTS, HIDDEN, INTER, MAX_TOKENS, TOP_K, load

WORLDS = (1, 2, 4, 8)  # moe_shapes.h: 128 % world == 0, world <= MAX_WORLD
SYNC_BYTES = 65536


def check_ep_world(world, rank) -> tuple[int, int]:
    """(world, rank) for expert parallelism: R-RANK unless world is 1, 2, 4 or 8."""
    world, rank = check_world(world, rank)
    if world not in WORLDS:
        raise PeerError("R-RANK", f"world = {world}: moe_step splits 128 experts evenly over 1, 2, 4 or 8 ranks",
                        hint="run 1, 2, 4 or 8 ranks")
    return world, rank


def capacity_rows(world: int, max_tokens: int, block_m: int) -> int:
    """Rows of xs/hs/ys on one rank: every rank's tokens may route to it, plus padding."""
    return world * max_tokens * TOP_K + EXPERTS * block_m


def check_max_tokens(max_tokens) -> int:
    return integer("max_tokens", max_tokens, 1, MAX_TOKENS, code="R-SHAPE",
                   hint=f"an int in 1 .. {MAX_TOKENS}: the most tokens any rank passes in one launch")


def weight_pointer(name: str, w, tail: tuple[int, int], world: int, rank: int, device: int) -> int:
    """The address the kernel indexes as expert 0 of `name`: the tensor's own for the full
    [128, *tail] weights, else rank r's [P, *tail] slice rebased by r P experts."""
    import torch
    P = EXPERTS // world
    expect_tensor(name, w, dtype=torch.bfloat16, device=device, align=16)
    full = tuple(w.shape) == (EXPERTS, *tail)
    if not full and tuple(w.shape) != (P, *tail):
        raise LaunchError("R-SHAPE", f"{name} has shape {list(w.shape)}; rank {rank} of {world} takes "
                          f"[{P}, {tail[0]}, {tail[1]}] (its experts) or [{EXPERTS}, {tail[0]}, {tail[1]}]",
                          hint=f"pass {name}[{rank * P}:{(rank + 1) * P}] of this rank's experts")
    expect_tensor(name, w, shape=((EXPERTS if full else P), *tail), dtype=torch.bfloat16, device=device, align=16)
    ptr = w.data_ptr()
    if not full:
        ptr -= rank * P * tail[0] * tail[1] * 2
        if ptr <= 0:
            raise LaunchError("R-LAYOUT", f"{name}'s address {w.data_ptr():#x} is too low to index as experts "
                              f"{rank * P}..{(rank + 1) * P - 1}", hint=f"pass the full [{EXPERTS}, ...] weights")
    return ptr


class EpStep:
    """One rank's expert-parallel MoE layer for up to `max_tokens` tokens per launch."""

    def __init__(self, exchange, *, max_tokens: int, device: int = 0, kernel_dir=None, control: bool = False,
                 name: str = "moe_step"):
        import torch
        self.world, self.rank = check_ep_world(exchange.world, exchange.rank)
        self.max_tokens = check_max_tokens(max_tokens)
        self.exchange, self.device = exchange, device_index(device)
        self.step = load(kernel_dir, self.device, control=control, name=name)
        self.block_m = int(self.step.kernel.manifest.facts["block_m"])
        rows = capacity_rows(self.world, self.max_tokens, self.block_m)
        self._bufs, self.table, self.hs = [], None, None
        try:  # a failure anywhere leaves nothing open behind it
            for n in (SYNC_BYTES, rows * HIDDEN * 2, rows * HIDDEN * 2):  # sync, xs, ys
                self._bufs.append(SymmetricBuffer.open(n, world=self.world, rank=self.rank, exchange=exchange,
                                                       device=self.device))
            self.sync, self.xs, self.ys = self._bufs
            self.table = peer_table([self.xs, self.sync, self.ys])  # moe_shapes.h PEER_XS, PEER_SYNC, PEER_YS
            self.hs = torch.empty(rows * INTER, dtype=torch.bfloat16, device=torch.device("cuda", self.device))
            torch.cuda.synchronize(self.device)
            exchange.barrier()  # every rank's buffers are zero before any rank launches
        except BaseException:
            if self.table is not None:
                self.table.close()
                self.table = None
            for b in reversed(self._bufs):
                b.close()
            self._bufs, self.hs = [], None
            raise

    def workspaces(self) -> dict:
        return {"sync": (self.sync.local, self.sync.nbytes), "xs": (self.xs.local, self.xs.nbytes),
                "ys": (self.ys.local, self.ys.nbytes), "hs": self.hs}

    def params(self, x, router_w, w13, w2, out=None) -> dict:
        import torch
        if self.table is None:
            raise LaunchError("R-CUDA", "this EpStep was closed", hint="open a new EpStep")
        dev = self.device
        expect_tensor("x", x, shape=(None, HIDDEN), dtype=torch.bfloat16, device=dev, align=16)
        T = x.shape[0]
        if not 1 <= T <= self.max_tokens:
            raise LaunchError("R-SHAPE", f"x has {T} tokens; this EpStep takes 1 .. {self.max_tokens}",
                              hint="open the EpStep with a larger max_tokens (the same on every rank)")
        expect_tensor("router_w", router_w, shape=(EXPERTS, HIDDEN), dtype=torch.bfloat16, device=dev, align=16)
        p13 = weight_pointer("w13", w13, (2 * INTER, HIDDEN), self.world, self.rank, dev)
        p2 = weight_pointer("w2", w2, (HIDDEN, INTER), self.world, self.rank, dev)
        if out is None:
            out = torch.empty((T, HIDDEN), dtype=torch.bfloat16, device=x.device)
        else:
            expect_tensor("out", out, shape=(T, HIDDEN), dtype=torch.bfloat16, device=dev, align=16)
            expect_disjoint("out", out, {"x": x, "router_w": router_w, "w13": w13, "w2": w2})
        return {"x": x, "router_w": router_w, "w13": p13, "w2": p2, "out": out, "t": T,
                "rank": self.rank, "world": self.world, "peers": self.table.ptr, **dict.fromkeys(BIAS_PARAMS, 0)}  # (Qwen3: no biases)

    def __call__(self, x, router_w, w13, w2, out=None, *, stream=None):
        expect_stream(stream)
        p = self.params(x, router_w, w13, w2, out)
        self.step.kernel.launch_with(p, stream=stream, workspaces=self.workspaces())
        return p["out"]

    def open(self, x, router_w, w13, w2, out=None):
        """A planned session (`s.launch()`, CUDA-graph capturable; `s.out`). Every rank must
        launch it as often as the others launch theirs."""
        p = self.params(x, router_w, w13, w2, out)
        s = self.step.kernel.open(workspaces=self.workspaces(), **p)
        s.out = p["out"]
        return s

    def close(self) -> None:
        """Wait for this rank's launches and for every rank (nobody reads the peers' buffers
        any more), then unmap. Call it on every rank."""
        import torch
        if self.table is None:
            return
        torch.cuda.synchronize(self.device)
        self.exchange.barrier()
        self.table.close()
        self.table = None
        for b in reversed(self._bufs):
            b.close()
        self.hs = None
