"""The driver side of pipelink.runtime.peers: symmetric buffers mapped into every rank, and the
device table of peer base addresses (`peers` parameters). See pipelink.runtime.peers for use."""

from __future__ import annotations

import os
import struct
import sys
from dataclasses import replace
from typing import Callable, Sequence

from pipelink.common.diagnostics import Fact
from pipelink.runtime.peers import PeerError, RankInfo, check_agreement, check_size, check_world


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise PeerError("R-PEER", f"cuda.bindings is not importable ({e})",
                        hint="pip install 'cuda-bindings>=13,<14'") from None
    return driver


def _ok(drv, res, what: str, hint: str = ""):
    err = res[0] if isinstance(res, tuple) else res
    if err != drv.CUresult.CUDA_SUCCESS:
        try:
            name = drv.cuGetErrorName(err)[1].decode()
        except Exception:  # noqa: BLE001
            name = str(err)
        raise PeerError("R-PEER", f"{what} failed: {name}",
                        hint=hint or "the driver refused the peer mapping (same driver and GPUs on every rank?)")
    if isinstance(res, tuple):
        return res[1] if len(res) == 2 else res[1:]
    return None


class _Undo:
    """Cleanup actions, run newest first; each one runs even if an earlier one fails."""

    def __init__(self):
        self.steps: list[tuple[str, Callable[[], object]]] = []

    def push(self, what: str, fn: Callable[[], object]) -> None:
        self.steps.append((what, fn))

    def run(self) -> list[str]:
        failed = []
        while self.steps:
            what, fn = self.steps.pop()
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - keep undoing; report at the end
                failed.append(f"{what}: {e}")
        return failed


class SymmetricBuffer:
    """One buffer of `nbytes` on each of `world` ranks, all mapped in this process:
    rank s's at `window + s * stride` (`stride` = nbytes rounded to the granularity)."""

    def __init__(self):  # use SymmetricBuffer.open
        self.world = self.rank = self.nbytes = self.stride = self.window = 0
        self.device = 0
        self._undo = _Undo()
        self._drv = None
        self._ctx = None

    @classmethod
    def open(cls, nbytes: int, *, world: int, rank: int, exchange, device: int = 0, driver=None) -> "SymmetricBuffer":
        world, rank = check_world(world, rank)
        nbytes = check_size(nbytes)
        if exchange.world != world or exchange.rank != rank:
            raise PeerError("R-RANK", f"the exchange is rank {exchange.rank} of {exchange.world}, the buffer "
                            f"rank {rank} of {world}", hint="open the buffer with the exchange's world and rank")
        self = cls()
        self.world, self.rank, self.nbytes, self.device = world, rank, nbytes, int(device)
        drv = self._drv = driver or _driver()
        undo = self._undo
        try:
            self._map(drv, exchange)
        except BaseException as e:
            failed = undo.run()
            if failed and isinstance(e, PeerError):
                d = e.diagnostics[0]
                e.diagnostics[0] = replace(d, facts=tuple(d.facts) + tuple(Fact("cleanup", f) for f in failed))
            raise
        return self

    def _map(self, drv, exchange) -> None:
        undo = self._undo
        A = drv.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        _ok(drv, drv.cuInit(0), "cuInit", "no usable NVIDIA driver or GPU here")
        dev = _ok(drv, drv.cuDeviceGet(self.device), f"cuDeviceGet({self.device})", "check the device= argument")
        self._ctx = _ok(drv, drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        undo.push("release the primary context", lambda: drv.cuDevicePrimaryCtxRelease(dev))
        _ok(drv, drv.cuCtxPushCurrent(self._ctx), "cuCtxPushCurrent")
        undo.push("pop the context", lambda: drv.cuCtxPopCurrent())
        uuid = _ok(drv, drv.cuDeviceGetUuid(dev), "cuDeviceGetUuid")
        uuid = bytes(getattr(uuid, "bytes", b"")) if not isinstance(uuid, (bytes, bytearray)) else bytes(uuid)
        prop = drv.CUmemAllocationProp()
        prop.type = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = self.device
        prop.requestedHandleTypes = A
        gran = int(_ok(drv, drv.cuMemGetAllocationGranularity(
            prop, drv.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "cuMemGetAllocationGranularity"))
        gran = max(gran, 1)
        self.stride = -(-self.nbytes // gran) * gran
        handle = _ok(drv, drv.cuMemCreate(self.stride, prop, 0), f"cuMemCreate({self.stride} B)",
                     "out of device memory, or this GPU cannot export memory as a file descriptor")
        undo.push("release this rank's allocation", lambda: drv.cuMemRelease(handle))
        fd = int(_ok(drv, drv.cuMemExportToShareableHandle(handle, A, 0), "cuMemExportToShareableHandle"))
        undo.push("close the exported descriptor", lambda: os.close(fd))
        # zero before any peer can see it: the exchange below is the point after which they may
        mine = RankInfo(self.rank, self.world, self.nbytes, self.stride, uuid)
        got = exchange.allgather(mine.pack(), fd)
        for _, f in got:
            if f is not None:
                undo.push("close a peer's descriptor", (lambda f=f: os.close(f)))
        infos = [RankInfo.unpack(p) for p, _ in got]
        check_agreement(infos, self.world)
        fds = [f for _, f in got]
        if any(f is None for f in fds):
            raise PeerError("R-PEER", "a peer sent no allocation descriptor")
        self.window = int(_ok(drv, drv.cuMemAddressReserve(self.stride * self.world, gran, 0, 0),
                              f"reserving {self.stride * self.world} B of virtual addresses"))
        undo.push("free the virtual range", lambda: drv.cuMemAddressFree(self.window, self.stride * self.world))
        for s in range(self.world):
            h = handle if s == self.rank else _ok(
                drv, drv.cuMemImportFromShareableHandle(fds[s], A), f"importing rank {s}'s allocation",
                "the peer's GPU is not reachable from this one (no P2P), or the driver refused the descriptor")
            if s != self.rank:
                undo.push(f"release rank {s}'s import", (lambda h=h: drv.cuMemRelease(h)))
            va = self.window + s * self.stride
            _ok(drv, drv.cuMemMap(va, self.stride, 0, h, 0), f"mapping rank {s}'s allocation")
            undo.push(f"unmap rank {s}", (lambda va=va: drv.cuMemUnmap(va, self.stride)))
        acc = drv.CUmemAccessDesc()
        acc.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        acc.location.id = self.device
        acc.flags = drv.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        _ok(drv, drv.cuMemSetAccess(self.window, self.stride * self.world, [acc], 1),
            "granting this device access to the peer range", "the GPUs cannot reach each other (P2P)")
        _ok(drv, drv.cuMemsetD8(self.local, 0, self.stride), "zeroing the local buffer")
        _ok(drv, drv.cuCtxSynchronize(), "waiting for the zeroing")
        exchange.barrier()  # every rank zeroed its own buffer before anyone uses a peer's
        _ok(drv, drv.cuCtxPopCurrent(), "cuCtxPopCurrent")
        # keep only the undo steps that free resources (descriptors are no longer needed)
        keep = [(w, f) for w, f in undo.steps if not w.startswith(("close", "pop"))]
        for w, f in undo.steps:
            if w.startswith("close"):
                f()
        undo.steps = keep

    @property
    def local(self) -> int:
        return self.window + self.rank * self.stride

    def peer(self, s: int) -> int:
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < self.world:
            raise PeerError("R-RANK", f"peer {s!r} is out of range 0..{self.world - 1}")
        return self.window + s * self.stride

    @property
    def peers(self) -> list[int]:
        return [self.window + s * self.stride for s in range(self.world)]

    def close(self) -> None:
        """Unmap every rank's mapping and free this rank's allocation (after the device is
        idle). Every rank must be done using the buffers: synchronise the ranks first."""
        if not self._undo.steps:
            return
        drv = self._drv
        release_ctx = self._undo.steps.pop(0)  # the first step pushed: release the primary context
        drv.cuCtxPushCurrent(self._ctx)
        drv.cuCtxSynchronize()
        failed = self._undo.run()
        drv.cuCtxPopCurrent()
        release_ctx[1]()
        if failed:
            raise PeerError("R-PEER", "closing the symmetric buffer: " + "; ".join(failed))

    def __del__(self):
        try:
            if getattr(self, "_undo", None) is not None and self._undo.steps and not sys.is_finalizing():
                self.close()
        except Exception:  # noqa: BLE001
            pass


class PeerTable:
    """A device array of u64: for each rank s, the base of each buffer in order (rank-major),
    as mapped in this process. The `peers` parameter shape of moe_dispatch ({xs, sync} per rank)."""

    def __init__(self, rows: Sequence[Sequence[int]], device: int = 0, driver=None):
        drv = self._drv = driver or _driver()
        self.values = [int(a) for row in rows for a in row]
        self.world = len(rows)
        self.width = len(rows[0]) if rows else 0
        data = struct.pack(f"<{len(self.values)}Q", *self.values)
        _ok(drv, drv.cuInit(0), "cuInit")
        dev = _ok(drv, drv.cuDeviceGet(int(device)), "cuDeviceGet")
        self._dev = dev
        self._ctx = _ok(drv, drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        self.ptr = 0
        try:
            _ok(drv, drv.cuCtxPushCurrent(self._ctx), "cuCtxPushCurrent")
            try:
                self.ptr = int(_ok(drv, drv.cuMemAlloc(max(len(data), 8)), "allocating the peer table"))
                _ok(drv, drv.cuMemcpyHtoD(self.ptr, data, len(data)), "copying the peer table")
            finally:
                drv.cuCtxPopCurrent()
        except BaseException:
            if self.ptr:
                drv.cuMemFree(self.ptr)
                self.ptr = 0
            drv.cuDevicePrimaryCtxRelease(dev)
            raise

    def close(self) -> None:
        if self.ptr:
            drv = self._drv
            drv.cuCtxPushCurrent(self._ctx)
            drv.cuCtxSynchronize()
            drv.cuMemFree(self.ptr)
            drv.cuCtxPopCurrent()
            drv.cuDevicePrimaryCtxRelease(self._dev)
            self.ptr = 0


def peer_table(buffers: Sequence[SymmetricBuffer], driver=None) -> PeerTable:
    """Per rank s: [b.peer(s) for b in buffers] -> device u64 array (R-PEER if they disagree)."""
    if not buffers:
        raise PeerError("R-PEER", "peer_table needs at least one symmetric buffer")
    w = {(b.world, b.rank, b.device) for b in buffers}
    if len(w) != 1:
        raise PeerError("R-PEER", f"the buffers belong to different ranks or devices: {sorted(w)}",
                        hint="build one table from buffers opened by this rank")
    world, _, device = w.pop()
    return PeerTable([[b.peer(s) for b in buffers] for s in range(world)], device, driver)
