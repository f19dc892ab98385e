"""Solve pass: one joint placement of the SM's resources with Z3.

Variables: every shared-memory claim's offset, every ring's depth, every named barrier's
id, every role's first warp and register budget. Hard constraints: capacity, alignment,
non-overlap of claims whose lifetimes (phases) can meet, barrier ids 1..15 all different,
warp ranges disjoint and warp-group aligned where asked, one setmaxnreg budget per warp
group, and the register file (64K) shared by all warp groups. Objectives, in order: deeper
rings, larger register budgets, smaller shared-memory footprint, fewer warps; then
tie-breaks that make the answer a function of the input alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pipelink.check import Checked, Claim
from pipelink.diagnostics import Fact, Rejected, reject

REGISTER_FILE = 65536
MAX_WARPS = 32
MIN_BUDGET = 24
SOLVER_TIMEOUT_MS = 60_000


@dataclass
class Placement:
    offsets: dict[str, int]  # claim key -> byte offset in the dynamic window
    sizes: dict[str, int]
    depths: dict[str, int]  # ring -> depth
    barrier_ids: dict[str, int]
    warp_begin: dict[str, int]  # role instance -> first warp
    budgets: dict[str, int]  # role instance -> setmaxnreg budget
    group_budgets: list[int]  # per warp group
    warps: int  # block size in warps (a multiple of 4)
    dynamic_smem: int
    proven_optimal: bool
    solve_seconds: float
    objectives: dict[str, int] = field(default_factory=dict)

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def entry_regs(self) -> int:
        """Registers per thread a block of this size gets at entry (__launch_bounds__(t, 1))."""
        return min(255, (REGISTER_FILE // self.threads) // 8 * 8)

    @property
    def uses_setmaxnreg(self) -> bool:
        return any(b != self.entry_regs for b in self.group_budgets)


def _phases_meet(a: Claim, b: Claim) -> bool:
    return a.phase == "kernel" or b.phase == "kernel" or a.phase == b.phase


def dynamic_capacity(ch: Checked) -> int:
    static = -(-ch.static_smem // 1024) * 1024  # dynamic window starts 1024-aligned after static
    return ch.capacity - static


def solve(ch: Checked, *, timeout_ms: int = SOLVER_TIMEOUT_MS) -> Placement:
    # z3 is imported here, not at module level: the runtime (and a GPU machine without z3)
    # uses Placement and the generated code's layout without ever solving.
    try:
        import z3
    except ImportError:
        raise reject("E-TOOLKIT", "z3-solver is not installed", hint="run `bash tools/setup.sh`") from None
    t0 = time.perf_counter()
    cap = dynamic_capacity(ch)
    hard: list[tuple[str, object]] = []  # (group, constraint) — groups name the diagnostic

    depth = {r.name: z3.Int(f"depth.{r.name}") for r in ch.rings}
    for r in ch.rings:
        hard.append(("ring", z3.And(depth[r.name] >= r.depth[0], depth[r.name] <= r.depth[1])))

    off, size = {}, {}
    for c in ch.claims:
        k = z3.Int(f"k.{c.key}")
        off[c.key] = c.align * k
        hard.append(("smem", k >= 0))
        size[c.key] = c.bytes + (c.per_depth * depth[c.ring] if c.ring else 0)
    footprint = z3.Int("footprint")
    for c in ch.claims:
        hard.append(("smem", off[c.key] + size[c.key] <= footprint))
    hard.append(("smem", footprint <= cap))
    hard.append(("smem", footprint >= 0))
    claims = ch.claims
    for i in range(len(claims)):
        for j in range(i + 1, len(claims)):
            a, b = claims[i], claims[j]
            if _phases_meet(a, b):
                hard.append(("smem", z3.Or(off[a.key] + size[a.key] <= off[b.key],
                                            off[b.key] + size[b.key] <= off[a.key])))

    bar = {b.key: z3.Int(f"bar.{b.key}") for b in ch.barriers}
    for v in bar.values():
        hard.append(("barrier", z3.And(v >= 1, v <= 15)))
    if len(bar) > 1:
        hard.append(("barrier", z3.Distinct(*bar.values())))

    groups = z3.Int("warp_groups")
    hard.append(("warps", z3.And(groups >= 1, groups <= MAX_WARPS // 4)))
    begin, budget = {}, {}
    for r in ch.roles:
        n = r.inst.name
        begin[n] = z3.Int(f"warp.{n}")
        q = z3.Int(f"regs8.{n}")
        budget[n] = 8 * q
        hard.append(("warps", begin[n] >= 0))
        hard.append(("warps", begin[n] + r.warps <= 4 * groups))
        if r.aligned:
            hard.append(("warps", begin[n] % 4 == 0))
        lo, hi = r.regs
        hard.append(("regs", z3.And(budget[n] >= max(lo, MIN_BUDGET), budget[n] <= hi)))
    roles = ch.roles
    for i in range(len(roles)):
        for j in range(i + 1, len(roles)):
            a, b = roles[i].inst.name, roles[j].inst.name
            hard.append(("warps", z3.Or(begin[a] + roles[i].warps <= begin[b],
                                         begin[b] + roles[j].warps <= begin[a])))
    group_budget = []
    for g in range(MAX_WARPS // 4):
        gb = z3.Int(f"group_regs.{g}")
        group_budget.append(gb)
        covers = []
        for r in roles:
            n = r.inst.name
            cov = z3.And(begin[n] < 4 * (g + 1), begin[n] + r.warps > 4 * g)
            covers.append(cov)
            hard.append(("regs", z3.Implies(cov, gb == budget[n])))
        hard.append(("regs", z3.If(g < groups, z3.Or(z3.Or(*covers) if covers else False, gb == MIN_BUDGET), gb == 0)))
    hard.append(("regs", z3.Sum(*[128 * gb for gb in group_budget]) <= REGISTER_FILE))

    # Feasibility first, with tracked groups, so an impossible kernel gets a named diagnostic.
    feas = z3.Solver()
    feas.set("timeout", timeout_ms)
    marks = {g: z3.Bool(f"group.{g}") for g in ("ring", "smem", "barrier", "warps", "regs")}
    for g, c in hard:
        feas.add(z3.Implies(marks[g], c))
    res = feas.check(*marks.values())
    if res == z3.unsat:
        core = {str(x).split(".", 1)[1] for x in feas.unsat_core()}
        raise _infeasible(ch, core, cap)
    if res != z3.sat:
        raise reject("L-SOLVE", f"the solver gave up after {timeout_ms} ms ({feas.reason_unknown()})",
                     hint="simplify the composition or report it: this kernel is unusually large")

    opt = z3.Optimize()
    opt.set("timeout", timeout_ms)
    for _, c in hard:
        opt.add(c)
    ring_total = z3.Sum(*depth.values()) if depth else z3.IntVal(0)
    reg_total = z3.Sum(*[r.warps * budget[r.inst.name] for r in roles]) if roles else z3.IntVal(0)
    opt.maximize(ring_total)
    opt.maximize(reg_total)
    opt.minimize(footprint)
    opt.minimize(groups)
    # Tie-breaks: earlier-listed things get lower offsets, warps and ids.
    n = len(claims)
    opt.minimize(z3.Sum(*[(n - i) * off[c.key] for i, c in enumerate(claims)]) if claims else z3.IntVal(0))
    opt.minimize(z3.Sum(*[(len(roles) - i) * begin[r.inst.name] for i, r in enumerate(roles)]) if roles else z3.IntVal(0))
    opt.minimize(z3.Sum(*[(len(bar) - i) * v for i, v in enumerate(bar.values())]) if bar else z3.IntVal(0))
    res = opt.check()
    proven = res == z3.sat
    if res == z3.unknown:
        model = opt.model() if opt.model() is not None else None
        if model is None or len(model) == 0:
            raise reject("L-SOLVE", f"the solver found no placement within {timeout_ms} ms",
                         hint="simplify the composition")
    model = opt.model()
    val = lambda e: model.eval(e, model_completion=True).as_long()  # noqa: E731
    offsets = {c.key: val(off[c.key]) for c in claims}
    sizes = {c.key: val(z3.IntVal(size[c.key]) if isinstance(size[c.key], int) else size[c.key]) for c in claims}
    ngroups = val(groups)
    p = Placement(
        offsets=offsets, sizes=sizes,
        depths={k: val(v) for k, v in depth.items()},
        barrier_ids={k: val(v) for k, v in bar.items()},
        warp_begin={k: val(v) for k, v in begin.items()},
        budgets={k: val(v) for k, v in budget.items()},
        group_budgets=[val(group_budget[g]) for g in range(ngroups)],
        warps=4 * ngroups,
        dynamic_smem=max([offsets[k] + sizes[k] for k in offsets], default=0),
        proven_optimal=proven,
        solve_seconds=time.perf_counter() - t0,
    )
    p.objectives = {"ring_depth_total": val(ring_total), "register_total": val(reg_total),
                    "footprint": p.dynamic_smem, "warps": p.warps}
    return p


def _infeasible(ch: Checked, core: set[str], cap: int) -> Rejected:
    if "barrier" in core:
        return reject("L-BARRIER", f"{len(ch.barriers)} named barriers are needed; ids 1..15 are free",
                      facts=[Fact("barrier", b.key, b.origin) for b in ch.barriers], hint="use fewer named barriers")
    if "smem" in core:
        need = sum(c.bytes + c.per_depth * next(r.depth[0] for r in ch.rings if r.name == c.ring) if c.ring else c.bytes
                   for c in ch.claims)
        facts = [Fact(c.key.split(".")[0], f"{c.key}: {c.bytes} B" + (f" + {c.per_depth} B x depth(ring {c.ring})" if c.ring else "")
                      + f", align {c.align}, phase {c.phase}", c.origin) for c in ch.claims]
        facts.append(Fact("SM", f"{cap} B of dynamic shared memory ({ch.capacity} B less {ch.static_smem} B static) on {ch.comp.arch}"))
        return reject("L-SMEM", f"the shared-memory claims need at least about {need} B at the smallest ring depths; {cap} B are available",
                      clause="smem", facts=facts,
                      hint="lower a ring's minimum depth, shrink a claim, or put claims in disjoint phases")
    if "regs" in core or "warps" in core:
        facts = [Fact(r.inst.name, f"{r.warps} warps, regs = {list(r.regs)}" + (", warp-group aligned" if r.aligned else ""),
                      str(r.inst.contract.role.origin)) for r in ch.roles]
        if "regs" in core:
            return reject("L-REGS", "the roles' register budgets cannot share the 64K register file (or a warp group mixes budgets)",
                          clause="role.regs", facts=facts,
                          hint="lower a role's minimum registers (regs = [min, max]) or its warp count")
        return reject("L-WARPS", "the roles' warps do not fit one block with the alignment asked",
                      clause="role.warps", facts=facts, hint="use fewer warps or drop warpgroup_aligned where not needed")
    return reject("L-SOLVE", "no placement satisfies the ring depth ranges", facts=[Fact("core", ", ".join(sorted(core)))])


def first_fit(ch: Checked, depths: dict[str, int]) -> int | None:
    """Baseline: place claims in declaration order at the lowest aligned free offset.

    Returns the footprint, or None when it does not fit. Used to show what the solver buys.
    """
    cap = dynamic_capacity(ch)
    placed: list[tuple[int, int, Claim]] = []
    for c in ch.claims:
        sz = c.bytes + (c.per_depth * depths[c.ring] if c.ring else 0)
        o = 0
        while True:
            o = -(-o // c.align) * c.align
            clash = next((e for (s, e, other) in placed if _phases_meet(c, other) and o < e and s < o + sz), None)
            if clash is None:
                break
            o = clash
        if o + sz > cap:
            return None
        placed.append((o, o + sz, c))
    return max((e for _, e, _ in placed), default=0)
