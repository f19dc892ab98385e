"""What the check pass produces: the resources to place and the bindings to generate.

Plain data handed to solve.py and generate.py (`Checked`), plus `Diags`, the list every
check appends to, so that all conflicts of a kernel are reported together.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelink.common.diagnostics import Diagnostic
from pipelink.linker.compose import Composition, Instance
from pipelink.linker.contract import CallableDecl, TensorDecl


@dataclass(frozen=True)
class Role:
    inst: Instance
    warps: int
    aligned: bool
    regs: tuple[int, int]
    measured_regs: int


@dataclass(frozen=True)
class Ring:
    name: str
    producer: Instance
    consumer: Instance
    stage_bytes: int
    depth: tuple[int, int]
    full_arrivals: int  # producer's arrivals per stage
    empty_arrivals: int  # consumer's arrivals per stage
    align: int
    origin: str = ""  # both sides' clauses, for diagnostics


@dataclass(frozen=True)
class Claim:
    """A shared-memory region to place. Size is `bytes` + `per_depth` * depth(ring)."""

    key: str  # "inst.smem.name" / "ring.name.buffer" / "transfer.x"
    bytes: int
    align: int
    phase: str
    ring: str | None = None
    per_depth: int = 0
    origin: str = ""  # who claims it and where ("inst (pkg) at file:line"), for diagnostics


@dataclass(frozen=True)
class Barrier:
    key: str  # "inst.name" or "transfer.x"
    threads: int
    origin: str = ""  # the contract clause, for diagnostics


@dataclass(frozen=True)
class Transfer:
    exporter: Instance
    export: TensorDecl
    importer: Instance
    imp: TensorDecl
    kind: str  # "direct" | "staged"
    shape: tuple[int, ...]
    threads: int

    @property
    def key(self) -> str:
        return f"{self.exporter.name}.{self.export.name}"

    @property
    def elements(self) -> int:
        n = 1
        for x in self.shape:
            n *= x
        return n


@dataclass(frozen=True)
class CallBinding:
    importer: Instance
    imp: CallableDecl
    exporter: Instance
    exp: CallableDecl


@dataclass
class Checked:
    comp: Composition
    facts: dict[str, int]
    fact_owner: dict[str, Instance]
    roles: list[Role]
    rings: list[Ring]
    claims: list[Claim]
    barriers: list[Barrier]
    transfers: list[Transfer]
    calls: list[CallBinding]
    params: dict[str, str]  # kernel-wide name -> type
    static_smem: int
    capacity: int
    warnings: list[Diagnostic] = field(default_factory=list)


class Diags:
    """The diagnostics of one check() call: every check appends, check() raises them together."""

    def __init__(self):
        self.items: list[Diagnostic] = []
        self.unbound_importers: set[str] = set()  # instances with an import that found no (valid) export

    def add(self, code, message, *, clause="", facts=(), hint=""):
        self.items.append(Diagnostic(code, message, clause, tuple(facts), hint))
