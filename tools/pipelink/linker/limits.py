"""Limits pass: every size and count a contract states, held to the architecture's hard limits
when the component is packed (P-LIMIT), so a contract no kernel could ever place is refused
where it was written, not at some later link.

A size may be an expression over the contract's facts. The facts' values are fixed only when a
kernel links, so each expression is evaluated at the corners of what the contract says it
accepts (an owned value; each value of an `accept` list; the least and greatest multiple in an
`accept` range; 0 and 2^32-1 for a fact read with no `accept`). Every corner is a value the
contract accepts, so a corner over a limit is a real counterexample; the message names it. Past
_MAX_CORNERS combinations only each fact's least and greatest value are tried, and past that again
a bounded sample of those (the link checks the kernel's real values in any case).
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

from pipelink.linker.arch_limits import MAX_WARPS, MIN_BUDGET, REGISTER_FILE, SMEM_CAPACITY
from pipelink.linker.contract_types import MBARRIER_COUNT_MAX, U32_MAX, Contract, FactDecl, Origin
from pipelink.common.diagnostics import Fact, Rejected, reject
from pipelink.common.expr import BUILT_DEPTH, ExprError, evaluate, names_in

MAX_THREADS = 32 * MAX_WARPS  # 1024 threads per block
MAX_REGS_PER_THREAD = 255
NAMED_BARRIERS_FREE = 15  # ids 1..15; id 0 is __syncthreads()
DTYPE_BITS = {"f32": 32, "u32": 32, "i32": 32, "f16": 16, "bf16": 16, "u8": 8, "e4m3": 8, "e5m2": 8}
# Threads that hold one register tile of each scope (a "role" tile: the role's own warps).
SCOPE_THREADS = {"warp": 32, "warpgroup": 128}
_MAX_CORNERS = 4096  # beyond this many combinations, only each fact's least and greatest value


def fact_corners(fact: FactDecl) -> list[int]:
    """The values of `fact` the contract accepts that bound every other accepted value."""
    if fact.own is not None:
        return [fact.own]
    if fact.accept is not None:
        values = sorted(set(fact.accept))
        if fact.accept_range is None:
            return values
        return [v for v in values if fact.accepts(v)]
    if fact.accept_range is not None:
        lo, hi, mult = fact.accept_range
        first, last = -(-lo // mult) * mult, hi // mult * mult
        return [first, last] if first <= last else []
    return [0, U32_MAX]


def _count(facts: dict[str, list[int]]) -> int:
    count = 1
    for values in facts.values():
        count *= max(1, len(values))
    return count


def _environments(contract: Contract, names: set[str]):
    facts = {f.name: fact_corners(f) for f in contract.facts if f.name in names}
    if _count(facts) > _MAX_CORNERS:
        facts = {n: sorted({v[0], v[-1]}) if v else v for n, v in facts.items()}
    keys = sorted(facts)
    if _count(facts) <= _MAX_CORNERS:
        for combo in itertools.product(*(facts[k] for k in keys)):
            yield dict(zip(keys, combo))
        return
    # 2^n corners for n facts (13+ of them in one expression): enumerating them all made `pack` run
    # for minutes, then hours. Each fact all least or all greatest, each one alone at its other end,
    # then a seeded sample, _MAX_CORNERS in all: every one is still a value the contract accepts;
    # a corner missed here is still checked with the kernel's real values when it links.
    lists = [facts[k] for k in keys]
    if all(lists):  # else a fact accepts no value: other passes report it
        yield from itertools.islice(_sampled(keys, lists), _MAX_CORNERS)


def _sampled(keys: list[str], lists: list[list[int]]):
    yield from ({k: v[i] for k, v in zip(keys, lists)} for i in (0, -1))
    for j in range(len(keys)):
        for base in (0, -1):
            yield {k: v[(-1 - base) if n == j else base] for n, (k, v) in enumerate(zip(keys, lists))}
    rng = random.Random(0)
    while True:
        yield {k: rng.choice(v) for k, v in zip(keys, lists)}


def largest(contract: Contract, text: str | int) -> tuple[int, dict[str, int]] | None:
    """The greatest value of `text` over the facts' corners, with the corner that gives it; None
    when no corner evaluates (a bad expression or an empty accept set: other passes report those)."""
    try:
        names = names_in(text, BUILT_DEPTH)  # a tile's size multiplies its extents, each up to MAX_DEPTH deep
    except ExprError:
        return None
    best = None
    for env in _environments(contract, names):
        try:
            v = evaluate(text, env)
        except ExprError:
            continue
        if best is None or v > best[0]:
            best = (v, env)
    return best


class _Limits:
    def __init__(self, contract: Contract):
        self.c = contract
        self.side = f"contract {Path(contract.file).name}"
        self.items = []

    def over(self, clause: str, what: str, text, origin: Origin, limit: int, limit_text: str,
             factor: int = 1, factor_text: str = "") -> None:
        """Refuse `text` (times `factor`) if a corner of the facts takes it over `limit`."""
        got = largest(self.c, text)
        if got is None or got[0] * factor <= limit:
            return
        value, env = got
        at = ", ".join(f"{k} = {v}" for k, v in env.items())
        shown = f"{what} = {text!r}" + (f" = {value:,}" if not isinstance(text, int) else "")
        if at:
            shown += f" at {at}"
        if factor != 1:
            shown += f", {factor_text} = {value * factor:,}"
        self.items.append(reject(
            "P-LIMIT", f"{clause}: {value * factor:,} exceeds {limit_text} ({limit:,})", clause=clause,
            facts=[Fact(self.side, shown, str(origin))],
            hint=("make the size smaller, or narrow the facts' accept ranges so that every value the contract "
                  "accepts fits" if env else "make the size smaller")
                 + " (docs/CONTRACTS.md#limits-on-values)").diagnostics[0])


def check_limits(contract: Contract) -> None:
    """Raise P-LIMIT for every clause of `contract` that can exceed a hard limit of its arch."""
    c, lim = contract, _Limits(contract)
    smem = SMEM_CAPACITY.get(c.arch, 232448)
    smem_text = f"{c.arch}'s shared memory per block"
    for s in c.smem:
        lim.over(f"smem.{s.name}.bytes", "bytes", s.bytes, s.origin, smem, smem_text)
    for r in c.rings:
        lim.over(f"ring.{r.name}.stage_bytes", "stage_bytes", r.stage_bytes, r.origin, smem, smem_text,
                 factor=r.depth[0], factor_text=f"times depth min {r.depth[0]}")
        for key, text in (("arrivals", r.arrivals), ("peer_arrivals", r.peer_arrivals)):
            if text is not None:
                lim.over(f"ring.{r.name}.{key}", key, text, r.origin, MBARRIER_COUNT_MAX, "an mbarrier's arrival count")
    if len(c.barriers) > NAMED_BARRIERS_FREE:
        lim.items.append(reject(
            "P-LIMIT", f"{len(c.barriers)} named barriers exceed the {NAMED_BARRIERS_FREE} an SM has free (ids 1..15)",
            clause="barrier", facts=[Fact(lim.side, f"[barrier.{b.name}]", str(b.origin)) for b in c.barriers],
            hint="share a barrier between phases, or use mbarriers").diagnostics[0])
    for b in c.barriers:
        if isinstance(b.threads, int) and b.threads > MAX_THREADS:
            lim.over(f"barrier.{b.name}.threads", "threads", b.threads, b.origin, MAX_THREADS, "the threads of a block")
    if c.role is not None:
        need = c.role.warps * 32 * max(c.role.regs[0], MIN_BUDGET)
        lim.over("role.regs", "warps * 32 * regs min", need, c.role.origin, REGISTER_FILE,
                 "the SM's register file (registers)")
    for t in c.tensors:
        _tensor_limits(lim, t, smem, smem_text)
    if lim.items:
        raise Rejected(lim.items)


def _tensor_limits(lim: _Limits, t, smem: int, smem_text: str) -> None:
    """A tile in shared memory fits the block's shared memory; a register tile fits 255
    registers in each thread that holds it."""
    bits = DTYPE_BITS.get(t.dtype)
    if bits is None:
        return
    elements = " * ".join(f"({x})" for x in t.shape)
    clause = f"{t.direction}.{t.name}.shape"
    if t.space == "smem":
        lim.over(clause, "elements", elements, t.origin, smem, smem_text,
                 factor=bits // 8 or 1, factor_text=f"times {t.dtype} bytes")
        return
    threads = SCOPE_THREADS.get(t.scope)
    if t.scope == "role" and lim.c.role is not None:
        threads = 32 * lim.c.role.warps
    if t.space == "reg" and threads:
        words = f"ceil_div({elements} * {bits}, {32 * threads})"  # 32-bit registers per thread
        lim.over(clause, "registers per thread", words, t.origin, MAX_REGS_PER_THREAD,
                 f"the registers of a thread ({threads} threads hold the tile)")
