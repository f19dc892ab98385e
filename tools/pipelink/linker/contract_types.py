"""The typed contract: the vocabulary a contract may use and the declarations it parses to.

Plain frozen data: the parser (contract.py) builds these, every later pass only reads them.
Each declaration keeps the file:line it was written on, so diagnostics can cite it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

IDENT = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")  # \Z: `$` would also match before a final newline
PARAM_TYPES = {"ptr": 8, "u64": 8, "u32": 4, "i32": 4, "f32": 4, "tmap": 128}  # size in bytes
# Alignment in the parameter block: natural for scalars; a CUtensorMap must be 64-byte aligned.
PARAM_ALIGN = {"ptr": 8, "u64": 8, "u32": 4, "i32": 4, "f32": 4, "tmap": 64}
# Types a host provider fills (the caller never passes them).
PROVIDED_TYPES = {"tmap"}
FACT_TYPES = {"u32", "u64", "i32", "bool"}
# What each fact type can hold; a bool is 0 or 1 inside the linker and `true`/`false` in files.
# A fact's C type: its handle returns it, PL_OWN_FACT* stores it.
FACT_C_TYPES = {"u32": "unsigned", "u64": "unsigned long long", "i32": "int", "bool": "bool"}
FACT_BOUNDS = {"u32": (0, 2**32 - 1), "u64": (0, 2**64 - 1), "i32": (-2**31, 2**31 - 1), "bool": (0, 1)}
DTYPES = {"f32", "f16", "bf16", "u32", "i32", "u8", "e4m3", "e5m2"}
SPACES = {"reg", "smem", "global"}
MAX_RANK = 8  # extents of a tensor's shape (the kernels' tiles have 2 or 3)
SCOPES = {"role", "warpgroup", "warp", "cta"}
ARCHES = {"sm_90a", "sm_90", "sm_100a", "sm_120a", "sm_80"}
U32_MAX = 2**32 - 1
# mbarrier.init takes a count in 1 .. 2^20 - 1 (PTX ISA); larger counts crash nvJitLink or hang.
MBARRIER_COUNT_MAX = 2**20 - 1


@dataclass(frozen=True)
class Origin:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


def fact_text(ftype: str, value: int) -> str:
    """A fact's value as a contract writes it."""
    return ("true" if value else "false") if ftype == "bool" else str(value)


def own_fact_macro(ftype: str) -> str:
    """The pipelink.h macro that owns a fact of this type (PL_OWN_FACT, PL_OWN_FACT_U64, ...)."""
    return "PL_OWN_FACT" if ftype == "u32" else f"PL_OWN_FACT_{ftype.upper()}"


@dataclass(frozen=True)
class FactDecl:
    name: str
    type: str
    own: int | None  # value when owned, None when read
    accept: tuple[int, ...] | None  # explicit accepted values (reader)
    accept_range: tuple[int, int, int] | None  # (min, max, multiple_of)
    origin: Origin
    value_origin: Origin | None = None  # the `own =` or `accept =` line, which diagnostics cite

    def own_text(self) -> str:
        return f"own = {fact_text(self.type, self.own)}"

    def accepts(self, value: int) -> bool:
        if self.accept is not None and value not in self.accept:
            return False
        if self.accept_range is not None:
            lo, hi, mult = self.accept_range
            if not (lo <= value <= hi and value % mult == 0):
                return False
        return True

    def accept_text(self) -> str:
        if self.accept is not None:
            return f"accept = [{', '.join(fact_text(self.type, v) for v in self.accept)}]"
        if self.accept_range is not None:
            lo, hi, m = self.accept_range
            return f"accept = {{min = {lo}, max = {hi}, multiple_of = {m}}}"
        return "accepts any value"


@dataclass(frozen=True)
class SmemClaim:
    name: str
    bytes: str | int
    align: int
    phase: str
    origin: Origin


@dataclass(frozen=True)
class BarrierClaim:
    name: str
    threads: str | int  # "role" or a count
    origin: Origin


@dataclass(frozen=True)
class RingSide:
    name: str
    side: str  # producer | consumer
    stage_bytes: str | int
    depth: tuple[int, int]
    arrivals: str | int  # an integer, or an expression over facts (e.g. "8 * cluster_x")
    peer_arrivals: str | int | None
    align: int
    origin: Origin


@dataclass(frozen=True)
class TensorDecl:
    name: str
    direction: str  # export | import
    shape: tuple[str | int, ...]
    dtype: str
    layout: str
    space: str
    scope: str
    origin: Origin


@dataclass(frozen=True)
class CallableDecl:
    name: str
    direction: str  # export | import
    signature: str
    origin: Origin


@dataclass(frozen=True)
class RoleDecl:
    warps: int
    warpgroup_aligned: bool
    regs: tuple[int, int]
    origin: Origin


@dataclass(frozen=True)
class WorkspaceDecl:
    """[workspace.X]: global memory the runtime lends this instance for one launch."""

    name: str
    bytes: str | int  # expression over this component's integer params, its facts and grid_x
    zero: bool  # zero at the first launch; the component promises to leave it zero again
    align: int
    origin: Origin
    scope: str = "instance"  # "kernel": one buffer shared by name by every instance that declares it


# Names a workspace size may use besides the component's facts and integer params.
WORKSPACE_BUILTINS = ("grid_x",)
# Names the runtime supplies at launch (runtime.BUILTIN_GRID_NAMES and WORKSPACE_BUILTINS): no
# parameter or fact may take one, or it would replace the device's value (a caller-passed
# `resident_ctas` would lift a co_resident grid's bound).
RUNTIME_NAMES = ("num_sms", "resident_ctas") + WORKSPACE_BUILTINS
# "instance": the instance's own buffer; "kernel": one buffer per name for the whole kernel.
WORKSPACE_SCOPES = ("instance", "kernel")


@dataclass(frozen=True)
class HostDecl:
    """[host]: a host provider carried in the package fills `fills` from the lent `reads`."""

    provider: str  # file name of the Python provider, beside the contract
    fills: tuple[str, ...]
    reads: tuple[str, ...]
    facts: tuple[str, ...]
    origin: Origin


@dataclass(frozen=True)
class Contract:
    name: str
    kind: str  # role | library
    entry: str | None
    arch: str
    params: tuple[tuple[str, str], ...]
    role: RoleDecl | None
    facts: tuple[FactDecl, ...]
    smem: tuple[SmemClaim, ...]
    barriers: tuple[BarrierClaim, ...]
    rings: tuple[RingSide, ...]
    tensors: tuple[TensorDecl, ...]
    callables: tuple[CallableDecl, ...]
    file: str
    origin: Origin = field(default=None)  # type: ignore[assignment]
    param_origins: tuple[Origin, ...] = ()  # where each of `params` was written
    host: HostDecl | None = None
    workspaces: tuple[WorkspaceDecl, ...] = ()
    # [component] co_resident = true: the component waits for other CTAs of the grid (stream-K
    # fixups, readiness counters), so every CTA must be resident at once (L-RESIDENT, R-GRID).
    co_resident: bool = False

    def param_origin(self, name: str) -> Origin:
        for (n, _), o in zip(self.params, self.param_origins):
            if n == name:
                return o
        return Origin(self.file, 0)

    # Handle symbols this contract declares (what the object may reference) -----------
    def handle_symbols(self) -> dict[str, str]:
        """symbol -> clause, for every handle the component may call."""
        p = f"pl_{self.name}__"
        out: dict[str, str] = {}
        for s in self.smem:
            out[f"{p}smem__{s.name}"] = f"smem.{s.name}"
            out[f"{p}smem_at__{s.name}"] = f"smem.{s.name}"
        for b in self.barriers:
            for kind in ("bar", "bar_sync", "bar_arrive"):
                out[f"{p}{kind}__{b.name}"] = f"barrier.{b.name}"
        for f in self.facts:
            if f.own is None:
                out[f"{p}fact__{f.name}"] = f"fact.{f.name}"
        for r in self.rings:
            for part in ("depth", "buffer", "full", "empty"):
                out[f"{p}ring_{part}__{r.name}"] = f"ring.{r.name}"
        for t in self.tensors:
            if t.direction == "export":
                out[f"{p}export__{t.name}"] = f"export.{t.name}"
        for c in self.callables:
            if c.direction == "import":
                out[f"{p}call__{c.name}"] = f"callable.import.{c.name}"
        for w in self.workspaces:
            out[f"{p}ws__{w.name}"] = f"workspace.{w.name}"
        out[f"{p}role__warp_begin"] = "role"
        out[f"{p}role__warps"] = "role"
        return out

    def defined_symbols(self) -> dict[str, str]:
        """symbol -> clause, for every function the object must define."""
        p = f"pl_{self.name}__"
        out: dict[str, str] = {}
        if self.kind == "role" and self.entry:
            out[f"{p}entry__{self.entry}"] = "component.entry"
        for t in self.tensors:
            if t.direction == "import":
                out[f"{p}import__{t.name}"] = f"import.{t.name}"
        for c in self.callables:
            if c.direction == "export":
                out[f"{p}callable__{c.name}"] = f"callable.export.{c.name}"
        return out

    def fact(self, name: str) -> FactDecl | None:
        return next((f for f in self.facts if f.name == name), None)
