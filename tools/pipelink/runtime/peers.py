"""Peer mappings for N ranks: symmetric device buffers that every rank can address.

    from pipelink.runtime.peers import UnixExchange
    from pipelink.runtime.peers_cuda import SymmetricBuffer, peer_table
    ex = UnixExchange("job42", world=2, rank=r)          # rendezvous of the ranks' processes
    kv = SymmetricBuffer.open(nbytes, world=2, rank=r, exchange=ex, device=0)
    kv.local            # this rank's buffer (device pointer)
    kv.peer(s)          # rank s's buffer, as mapped in this process
    kv.window           # all ranks' buffers back to back: [world][nbytes], one virtual range
    t = peer_table([xs, sync])   # device array, per rank {xs base, sync base} (u64 each):
                                 # the `peers` parameter of moe_dispatch / attn_cp_loader
    ...; t.close(); kv.close(); ex.close()

Each rank allocates its buffer with the driver's virtual-memory API (cuMemCreate, exportable as
a POSIX file descriptor), the ranks swap descriptors over a Unix socket (SCM_RIGHTS; rank 0
relays), and each process maps every rank's allocation into one reserved virtual range, rank s
at `window + s * nbytes`. No NCCL, no symmetric-memory multicast: NVLink multicast stays off
(NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1, and this module
never calls cuMulticastCreate). Buffers are zeroed before any rank sees them.

Errors are `PeerError` (a `Rejected`) with one code and a hint: R-RANK (world or rank out of
range, a rank that answered twice), R-PEER (sizes that differ between ranks, an exchange that
timed out, a mapping the driver refused). A failed open closes everything it opened (mappings,
handles, the virtual range, descriptors): nothing is left behind.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from dataclasses import dataclass
from typing import Sequence

from pipelink.common.diagnostics import Diagnostic, Fact, Rejected

MAX_WORLD = 64
_MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


class PeerError(Rejected):
    def __init__(self, code: str, message: str, *, hint: str = "", facts=()):
        super().__init__(Diagnostic(code, message, "", tuple(facts), hint))

    @property
    def code(self) -> str:
        return self.diagnostics[0].code

    def __str__(self) -> str:
        return self.diagnostics[0].render()


def multicast_off_env() -> dict[str, str]:
    """The variables that keep NVLink multicast off; set them in every rank's environment."""
    return dict(_MULTICAST_OFF)


def check_world(world, rank) -> tuple[int, int]:
    """-> (world, rank) as ints, or R-RANK."""
    for name, v in (("world", world), ("rank", rank)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise PeerError("R-RANK", f"{name} must be an int, got {type(v).__name__} {v!r}",
                            hint="pass the process's rank and the number of ranks as ints")
    if not 1 <= world <= MAX_WORLD:
        raise PeerError("R-RANK", f"world = {world} is out of range 1..{MAX_WORLD}",
                        hint="world is the number of ranks (processes) that share the buffers")
    if not 0 <= rank < world:
        raise PeerError("R-RANK", f"rank = {rank} is out of range 0..{world - 1} for world = {world}",
                        hint="ranks are numbered 0 .. world-1, one per process")
    return world, rank


def check_size(nbytes) -> int:
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or not 1 <= nbytes < 2**48:
        raise PeerError("R-PEER", f"symmetric buffer size {nbytes!r} is not an int in 1 .. 2^48-1",
                        hint="pass the size in bytes of this rank's buffer (the same on every rank)")
    return nbytes


@dataclass(frozen=True)
class RankInfo:
    """What each rank announces before mapping: checked to agree across ranks."""
    rank: int
    world: int
    nbytes: int      # requested size
    mapped: int      # size rounded to the allocation granularity
    device_uuid: bytes = b""

    FORMAT = "<IIQQ16s"

    def pack(self) -> bytes:
        return struct.pack(self.FORMAT, self.rank, self.world, self.nbytes, self.mapped, self.device_uuid[:16])

    @classmethod
    def unpack(cls, data: bytes) -> "RankInfo":
        if len(data) != struct.calcsize(cls.FORMAT):
            raise PeerError("R-PEER", f"a peer sent {len(data)} bytes of rank information, not "
                            f"{struct.calcsize(cls.FORMAT)}", hint="every rank must run the same pipelink")
        r, w, n, m, u = struct.unpack(cls.FORMAT, data)
        return cls(r, w, n, m, u)


def check_agreement(infos: Sequence[RankInfo], world: int) -> None:
    """Every rank answered once, with the same world and buffer size (R-RANK / R-PEER)."""
    seen = [i.rank for i in infos]
    if sorted(seen) != list(range(world)):
        dup = sorted({r for r in seen if seen.count(r) > 1})
        raise PeerError("R-RANK", f"ranks {seen} answered for world = {world}" +
                        (f": rank {dup[0]} twice" if dup else ""),
                        hint="start one process per rank 0 .. world-1, each with its own rank")
    worlds = {i.world for i in infos}
    if worlds != {world}:
        raise PeerError("R-RANK", f"the ranks disagree on the world size: {sorted(worlds)}",
                        facts=[Fact(f"rank {i.rank}", f"world = {i.world}") for i in infos],
                        hint="start every rank with the same world")
    sizes = {i.nbytes for i in infos}
    if len(sizes) != 1 or len({i.mapped for i in infos}) != 1:
        raise PeerError("R-PEER", "symmetric buffer sizes differ between ranks: " +
                        ", ".join(f"rank {i.rank}: {i.nbytes} B" for i in sorted(infos, key=lambda i: i.rank)),
                        facts=[Fact(f"rank {i.rank}", f"nbytes = {i.nbytes}") for i in infos],
                        hint="a symmetric buffer has one size on every rank: open it with the same nbytes")


# --------------------------------------------------------------------------------------
# exchange: all-gather of (bytes, fd) among the ranks' processes
# --------------------------------------------------------------------------------------


class UnixExchange:
    """All-gather of a small message (<= 4096 B) and one file descriptor per rank over abstract
    Unix sequenced-packet sockets (Linux; one message per packet). Rank 0 listens on `\\0pipelink-peers-<name>`, collects every rank's
    message and descriptor, and sends all of them back to every rank."""

    def __init__(self, name: str, world: int, rank: int, *, timeout: float = 60.0):
        self.world, self.rank = check_world(world, rank)
        if not name or len(name) > 80 or "\0" in name:
            raise PeerError("R-PEER", f"exchange name {name!r} must be 1..80 characters without NUL",
                            hint="use a job-unique name, the same on every rank")
        self.address = "\0pipelink-peers-" + name
        self.timeout = timeout
        self._round = 0
        self._listener: socket.socket | None = None
        if self.world > 1 and self.rank == 0:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                s.bind(self.address)
                s.listen(self.world)
            except OSError as e:
                s.close()
                raise PeerError("R-PEER", f"cannot listen on the exchange socket of {name!r}: {e}",
                                hint="another job uses this name: pick a unique one") from None
            self._listener = s

    def allgather(self, payload: bytes, fd: int | None) -> list[tuple[bytes, int | None]]:
        """-> [(payload, fd)] ordered by rank; every returned fd is this process's own
        (the caller closes them). The caller's own fd comes back duplicated."""
        self._round += 1
        if self.world == 1:
            return [(payload, os.dup(fd) if fd is not None else None)]
        if self.rank == 0:
            return self._hub(payload, fd)
        return self._spoke(payload, fd)

    def barrier(self) -> None:
        for _, f in self.allgather(b"", None):
            if f is not None:
                os.close(f)

    def _hub(self, payload, fd):
        got: dict[int, tuple[bytes, int | None]] = {0: (payload, os.dup(fd) if fd is not None else None)}
        conns: list[socket.socket] = []
        deadline = time.monotonic() + self.timeout
        try:
            while len(conns) < self.world - 1:
                self._listener.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    c, _ = self._listener.accept()
                except socket.timeout:
                    raise PeerError("R-PEER", f"exchange round {self._round}: only {len(conns) + 1} of "
                                    f"{self.world} ranks joined within {self.timeout:.0f} s",
                                    hint="start every rank, with the same world and exchange name") from None
                c.settimeout(max(0.01, deadline - time.monotonic()))
                conns.append(c)
                r, data, f = _recv(c)
                if r in got or not 0 < r < self.world:
                    if f is not None:
                        os.close(f)
                    raise PeerError("R-RANK", f"exchange round {self._round}: rank {r} joined "
                                    f"{'twice' if r in got else f'a world of {self.world}'}",
                                    hint="start one process per rank 0 .. world-1, each with its own rank")
                got[r] = (data, f)
            for c in conns:
                for r in range(self.world):
                    _send(c, r, *got[r])
                c.recv(1)  # the rank has its copies: now our fds may close
            return [got[r] for r in range(self.world)]
        except BaseException:
            for _, f in got.values():
                if f is not None:
                    os.close(f)
            raise
        finally:
            for c in conns:
                c.close()

    def _spoke(self, payload, fd):
        deadline = time.monotonic() + self.timeout
        c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out: list[tuple[bytes, int | None]] = []
        try:
            while True:
                try:
                    c.connect(self.address)
                    break
                except (FileNotFoundError, ConnectionRefusedError):
                    if time.monotonic() > deadline:
                        raise PeerError("R-PEER", f"exchange round {self._round}: rank 0 did not answer within "
                                        f"{self.timeout:.0f} s", hint="start rank 0 with the same exchange name") from None
                    time.sleep(0.01)
            c.settimeout(max(0.01, deadline - time.monotonic()))
            _send(c, self.rank, payload, fd)
            for r in range(self.world):
                rr, data, f = _recv(c)
                out.append((data, f))
                if rr != r:
                    raise PeerError("R-PEER", f"exchange out of order: got rank {rr}, expected {r}")
            c.sendall(b"k")
            return out
        except BaseException:
            for _, f in out:
                if f is not None:
                    os.close(f)
            raise
        finally:
            c.close()

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None


_HDR = struct.Struct("<iI?")


def _send(c: socket.socket, rank: int, data: bytes, fd: int | None) -> None:
    if len(data) > 4096:
        raise PeerError("R-PEER", f"exchange message of {len(data)} bytes is over 4096")
    msg = _HDR.pack(rank, len(data), fd is not None) + data
    socket.send_fds(c, [msg], [fd] if fd is not None else [])


def _recv(c: socket.socket) -> tuple[int, bytes, int | None]:
    try:
        msg, fds, _, _ = socket.recv_fds(c, _HDR.size + 4096, 1)
    except socket.timeout:
        raise PeerError("R-PEER", "a peer stopped answering during the exchange",
                        hint="a rank exited or hung: check every rank's log") from None
    if len(msg) < _HDR.size:
        for f in fds:
            os.close(f)
        raise PeerError("R-PEER", "a peer closed the exchange early", hint="a rank exited: check its log")
    rank, n, has_fd = _HDR.unpack_from(msg)
    data = msg[_HDR.size:_HDR.size + n]
    if len(data) != n:
        for f in fds:
            os.close(f)
        raise PeerError("R-PEER", f"a peer's message of {n} bytes arrived cut to {len(data)}",
                        hint="exchange messages are at most 4096 bytes")
    if has_fd != bool(fds):
        for f in fds:
            os.close(f)
        raise PeerError("R-PEER", "a peer's file descriptor did not arrive")
    return rank, data, fds[0] if fds else None

