"""pipelink.runtime.peers (issue 13): symmetric buffers over N ranks.

CPU: world/rank/size validation (R-RANK, R-PEER), the ranks' agreement check, the Unix-socket
exchange of messages and file descriptors between ranks (threads stand in for processes),
and that a failed open releases everything it opened (a fake driver counts the resources).
GPU (skipped without torch + a GPU): two processes on one GPU open each other's buffers; a
kernel and a cuMemcpyDtoH read each peer's data; the peer table holds every rank's bases."""

from __future__ import annotations

import os
import sys
import threading
import types
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "tools" / "pipelink" / "runtime"
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests"))

from pipelink.runtime.peers import (PeerError, RankInfo, UnixExchange, check_agreement, check_size,  # noqa: E402
                                    check_world, multicast_off_env)
from pipelink.runtime.peers_cuda import SymmetricBuffer  # noqa: E402


@pytest.mark.parametrize("world, rank", [(0, 0), (65, 0), (2, 2), (2, -1), (True, 0), (2, 1.0), ("2", 0)])
def test_bad_world_or_rank(world, rank):
    with pytest.raises(PeerError) as e:
        check_world(world, rank)
    assert e.value.code == "R-RANK" and e.value.diagnostics[0].hint


@pytest.mark.parametrize("n", [0, -4, True, 1.5, 2**48])
def test_bad_size(n):
    with pytest.raises(PeerError) as e:
        check_size(n)
    assert e.value.code == "R-PEER"


def test_ranks_that_disagree_are_r_peer_or_r_rank():
    infos = [RankInfo(0, 2, 100, 2 << 20), RankInfo(1, 2, 100, 2 << 20)]
    check_agreement(infos, 2)
    with pytest.raises(PeerError) as e:
        check_agreement([infos[0], RankInfo(1, 2, 104, 2 << 20)], 2)
    assert e.value.code == "R-PEER" and "rank 0: 100 B, rank 1: 104 B" in str(e.value)
    with pytest.raises(PeerError) as e:
        check_agreement([infos[0], infos[0]], 2)
    assert e.value.code == "R-RANK" and "rank 0 twice" in str(e.value)
    with pytest.raises(PeerError) as e:
        check_agreement([infos[0], RankInfo(1, 3, 100, 2 << 20)], 2)
    assert e.value.code == "R-RANK"
    assert RankInfo.unpack(infos[1].pack()) == RankInfo(1, 2, 100, 2 << 20, b"\0" * 16)
    with pytest.raises(PeerError):
        RankInfo.unpack(b"short")


def test_multicast_stays_off():
    assert multicast_off_env() == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                                   "NVSHMEM_DISABLE_NVLS": "1"}
    src = (RUNTIME / "peers_cuda.py").read_text() + (RUNTIME / "peers.py").read_text()
    assert "cuMulticastCreate(" not in src


def _ranks(world, fn):
    """Run fn(rank) on `world` threads; -> results or exceptions by rank."""
    out = [None] * world
    def run(r):
        try:
            out[r] = fn(r)
        except BaseException as e:  # noqa: BLE001
            out[r] = e
    ts = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    return out


def test_exchange_passes_messages_and_descriptors():
    name = uuid.uuid4().hex
    def rank(r):
        ex = UnixExchange(name, 3, r, timeout=10)
        rd, wr = os.pipe()
        os.close(wr)
        inodes[r] = os.fstat(rd).st_ino
        try:
            got = ex.allgather(f"rank{r}".encode(), rd)
        finally:
            os.close(rd)
        res = []
        for data, fd in got:  # each rank's own pipe, as a descriptor of this "process"
            res.append((data.decode(), os.fstat(fd).st_ino))
            os.close(fd)
        ex.barrier()
        ex.close()
        return res
    inodes = [None] * 3
    out = _ranks(3, rank)
    for r in range(3):
        assert out[r] == [(f"rank{s}", inodes[s]) for s in range(3)], out[r]


def test_exchange_timeout_and_duplicate_rank():
    ex = UnixExchange(uuid.uuid4().hex, 2, 0, timeout=0.3)
    with pytest.raises(PeerError) as e:
        ex.allgather(b"x", None)
    assert e.value.code == "R-PEER" and "1 of 2 ranks joined" in str(e.value)
    ex.close()
    name = uuid.uuid4().hex
    out = _ranks(3, lambda r: (lambda ex: ex.allgather(b"", None))(UnixExchange(name, 3, min(r, 1), timeout=3)))
    assert isinstance(out[0], PeerError) and out[0].code == "R-RANK" and "twice" in str(out[0])
    assert all(isinstance(x, PeerError) for x in out)


class FakeDriver:
    """Just enough of cuda.bindings.driver for SymmetricBuffer.open; counts live resources and
    fails the call named in `fail`."""

    class CUresult:
        CUDA_SUCCESS = 0
        CUDA_ERROR_INVALID_VALUE = 1

    def __init__(self, fail=""):
        self.fail, self.live, self.ctx_depth = fail, {}, 0
        ns = types.SimpleNamespace
        self.CUmemAllocationHandleType = ns(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR=1)
        self.CUmemAllocationType = ns(CU_MEM_ALLOCATION_TYPE_PINNED=1)
        self.CUmemLocationType = ns(CU_MEM_LOCATION_TYPE_DEVICE=1)
        self.CUmemAllocationGranularity_flags = ns(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED=1)
        self.CUmemAccess_flags = ns(CU_MEM_ACCESS_FLAGS_PROT_READWRITE=3)
        self.CUmemAllocationProp = lambda: ns(location=ns())
        self.CUmemAccessDesc = lambda: ns(location=ns())
        self._n = 0

    def _r(self, name, *vals):
        if name == self.fail:
            return (1,) if not vals else (1, None)
        return (0, *vals) if vals else (0,)

    def _new(self, kind):
        self._n += 1
        self.live[(kind, self._n)] = True
        return (kind, self._n)

    def _free(self, h):
        assert self.live.pop(h), h
        return (0,)

    def cuGetErrorName(self, err):
        return (0, b"CUDA_ERROR_INVALID_VALUE")

    def cuInit(self, f): return self._r("cuInit")
    def cuDeviceGet(self, d): return self._r("cuDeviceGet", d)
    def cuDeviceGetUuid(self, d): return self._r("cuDeviceGetUuid", b"u" * 16)
    def cuDevicePrimaryCtxRetain(self, d): return self._r("x", self._new("ctx"))
    def cuDevicePrimaryCtxRelease(self, d):
        return self._free(next(k for k in self.live if k[0] == "ctx"))
    def cuCtxPushCurrent(self, c):
        self.ctx_depth += 1
        return (0,)
    def cuCtxPopCurrent(self):
        self.ctx_depth -= 1
        return (0, None)
    def cuCtxSynchronize(self): return (0,)
    def cuMemGetAllocationGranularity(self, p, f): return self._r("gran", 2 << 20)
    def cuMemCreate(self, n, p, f):
        return self._r("cuMemCreate", self._new("alloc")) if self.fail != "cuMemCreate" else (1, None)
    def cuMemRelease(self, h): return self._free(h)
    def cuMemExportToShareableHandle(self, h, t, f):
        rd, wr = os.pipe()
        os.close(wr)
        return (0, rd)
    def cuMemImportFromShareableHandle(self, fd, t):
        return (1, None) if self.fail == "import" else (0, self._new("import"))
    def cuMemAddressReserve(self, n, a, b, f): return (0, 1 << 40) if self._new("va") else None
    def cuMemAddressFree(self, va, n): return self._free(next(k for k in self.live if k[0] == "va"))
    def cuMemMap(self, va, n, o, h, f):
        if self.fail == "map" and h[0] == "import":
            return (1,)
        self.live[("map", va)] = True
        return (0,)
    def cuMemUnmap(self, va, n): return self._free(("map", va))
    def cuMemSetAccess(self, va, n, d, c): return self._r("access")
    def cuMemsetD8(self, p, v, n): return (0,)


class FakeExchange:
    def __init__(self, world, rank, sizes=None):
        self.world, self.rank, self.sizes = world, rank, sizes
        self.open_fds = []

    def allgather(self, payload, fd):
        me = RankInfo.unpack(payload)
        out = []
        for r in range(self.world):
            n = self.sizes[r] if self.sizes else me.nbytes
            rd, wr = os.pipe()
            os.close(wr)
            self.open_fds.append(rd)
            out.append((RankInfo(r, self.world, n, me.mapped).pack(), rd))
        return out

    def barrier(self):
        pass


def _fds_closed(fds):
    for f in fds:
        with pytest.raises(OSError):
            os.fstat(f)


@pytest.mark.parametrize("fail", ["import", "map", "access"])
def test_failed_open_leaves_nothing(fail):
    drv, ex = FakeDriver(fail), FakeExchange(3, 1)
    with pytest.raises(PeerError) as e:
        SymmetricBuffer.open(1000, world=3, rank=1, exchange=ex, driver=drv)
    assert e.value.code == "R-PEER" and e.value.diagnostics[0].hint
    assert drv.live == {} and drv.ctx_depth == 0
    _fds_closed(ex.open_fds)


def test_mismatched_sizes_leave_nothing():
    drv, ex = FakeDriver(), FakeExchange(2, 0, sizes=[1000, 2000])
    with pytest.raises(PeerError) as e:
        SymmetricBuffer.open(1000, world=2, rank=0, exchange=ex, driver=drv)
    assert e.value.code == "R-PEER" and "differ" in str(e.value)
    assert drv.live == {} and drv.ctx_depth == 0
    _fds_closed(ex.open_fds)


def test_open_and_close_with_fake_driver():
    drv, ex = FakeDriver(), FakeExchange(2, 1)
    b = SymmetricBuffer.open(1000, world=2, rank=1, exchange=ex, driver=drv)
    assert b.stride == 2 << 20 and b.local == b.window + b.stride and b.peers == [b.window, b.window + b.stride]
    _fds_closed(ex.open_fds)  # descriptors are closed once mapped
    assert drv.ctx_depth == 0
    with pytest.raises(PeerError) as e:
        b.peer(2)
    assert e.value.code == "R-RANK"
    b.close()
    assert drv.live == {}
    b.close()  # idempotent
    with pytest.raises(PeerError) as e:
        SymmetricBuffer.open(1000, world=2, rank=0, exchange=ex, driver=drv)
    assert e.value.code == "R-RANK"  # the exchange is rank 1


@pytest.mark.requires_gpu
@pytest.mark.parametrize("world", [1, 2])
def test_processes_share_buffers_on_one_gpu(world):
    pytest.importorskip("torch")
    from helpers.cp_worker import run_ranks
    res = run_ranks("peers", world, uuid.uuid4().hex)
    for r in res:
        assert r["ok"], r
