"""Solve pass: one joint placement of the SM's resources with Z3.

Variables: every shared-memory claim's offset, every ring's depth, every named barrier's
id, every role's first warp and register budget. Hard constraints: capacity, alignment,
non-overlap of claims whose lifetimes (phases) can meet, barrier ids 1..15 all different,
warp ranges disjoint and warp-group aligned where asked, one setmaxnreg budget per warp
group, and the block's register pool: setmaxnreg only moves registers between the block's
own warps, so the budgets must fit what the block got at launch (threads x entry registers,
e.g. 384 x 168 = 64,512 < 65,536: CUTLASS's 40/232 split). Objectives, in order: deeper
rings, larger register budgets, smaller shared-memory footprint, fewer warps; then
tie-breaks that make the answer a function of the input alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pipelink.common.diagnostics import Fact, Rejected, reject
from pipelink.linker.arch_limits import MAX_WARPS, MIN_BUDGET, REGISTER_FILE
from pipelink.linker.check_types import Checked, Claim

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
    smem_lower_bound: int = 0  # proven: no placement at these ring depths has a smaller footprint
    solver_work: int = 0  # Z3 resource units spent (deterministic, unlike seconds)
    limit: str = ""  # what stopped the search short of a proof, when it was not proven
    unproven: tuple[str, ...] = ()  # the objectives not proven optimal, e.g. ("registers",)
    depth_bound: int = 0  # proven: no placement has a larger total ring depth

    @property
    def solver_status(self) -> str:
        """'optimal (proven ...)' or 'best found, gap G to the lower bound after limit L'."""
        return solver_status(self)

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def entry_regs(self) -> int:
        """Registers per thread a block of this size gets at entry (__launch_bounds__(t, 1))."""
        return entry_regs(self.threads)

    @property
    def uses_setmaxnreg(self) -> bool:
        return any(b != self.entry_regs for b in self.group_budgets)


def solver_status(p: Placement, seconds: float | None = None) -> str:
    """The proof, or the gap left, in words. Without `seconds` the effort is given in Z3's
    resource units, which (unlike wall time) are the same on every run: the map stays
    byte-identical across builds."""
    effort = f"{seconds:.2f} s" if seconds is not None else f"{p.solver_work:,} Z3 resource units"
    if p.proven_optimal:
        return f"optimal (proven in {effort})"
    gap = p.dynamic_smem - p.smem_lower_bound
    return (f"best found, gap {gap} B to the lower bound {p.smem_lower_bound} B after limit {p.limit or 'none'}"
            f" ({effort}; not proven: {', '.join(p.unproven) or 'all'}"
            + (f"; ring depth total {sum(p.depths.values())}, at most {p.depth_bound}" if "ring depths" in p.unproven else "")
            + ")")


def smem_lower_bound(claims: list[Claim], sizes: dict[str, int]) -> int:
    """A footprint no placement beats: claims alive in one phase (with the kernel-long ones)
    are pairwise disjoint, and those aligned to A or more start in different A-byte slots.
    The same bounds are given to Z3 as implied constraints."""
    best = 0
    for phase in sorted({c.phase for c in claims if c.phase != "kernel"}) or ["kernel"]:
        alive = [c for c in claims if c.phase in ("kernel", phase)]
        best = max(best, sum(sizes[c.key] for c in alive))
        for a in sorted({c.align for c in alive if c.align > 1}):
            best = max(best, sum(-(-sizes[c.key] // a) * a for c in alive if c.align >= a) - a + 1)
    return best


def entry_regs(threads: int) -> int:
    return min(255, (REGISTER_FILE // threads) // 8 * 8)


def register_pool(warp_groups: int) -> int:
    """Registers a block of `warp_groups` warp groups owns at launch; setmaxnreg redistributes
    only these (asking for more than were released blocks forever)."""
    threads = 128 * warp_groups
    return threads * entry_regs(threads)


def _phases_meet(a: Claim, b: Claim) -> bool:
    return a.phase == "kernel" or b.phase == "kernel" or a.phase == b.phase


def dynamic_capacity(ch: Checked) -> int:
    static = -(-ch.static_smem // 1024) * 1024  # dynamic window starts 1024-aligned after static
    return ch.capacity - static


def solve(ch: Checked, *, timeout_ms: int = SOLVER_TIMEOUT_MS) -> Placement:
    """One joint placement. No constraint couples shared memory (offsets, ring depths) with
    warps and registers, or either with barrier ids, so the lexicographic optimum of the whole
    is the optimum of each part: solving them apart is exact, and much faster."""
    # z3 is imported here, not at module level: the runtime (and a GPU machine without z3)
    # uses Placement and the generated code's layout without ever solving.
    try:
        import z3  # noqa: F401
    except ImportError:
        raise reject("E-TOOLKIT", "z3-solver is not installed", hint="run `bash tools/setup.sh`") from None
    t0 = time.perf_counter()
    cap = dynamic_capacity(ch)
    smem, smem_unproven, (smem_bound, depth_bound), work = _solve_smem(ch, cap, timeout_ms)
    warps, warps_proven, warps_work = _solve_warps(ch, timeout_ms)
    if len(ch.barriers) > 15:
        raise _infeasible(ch, {"barrier"}, cap)
    # Barrier ids: all different in 1..15; in declaration order is optimal for the tie-break.
    barrier_ids = {b.key: i + 1 for i, b in enumerate(ch.barriers)}
    offsets, sizes, depths = smem
    begin, budgets, group_budgets = warps
    p = Placement(
        offsets=offsets, sizes=sizes, depths=depths, barrier_ids=barrier_ids,
        warp_begin=begin, budgets=budgets, group_budgets=group_budgets, warps=4 * len(group_budgets),
        dynamic_smem=max([offsets[k] + sizes[k] for k in offsets], default=0),
        proven_optimal=not smem_unproven and warps_proven,
        solve_seconds=time.perf_counter() - t0,
        smem_lower_bound=smem_bound, solver_work=work + warps_work,
        limit=f"{CHECK_RLIMIT:,} Z3 resource units per check, {timeout_ms / 1000:g} s in all",
        unproven=tuple(smem_unproven) + (() if warps_proven else ("registers",)), depth_bound=depth_bound,
    )
    if p.proven_optimal:
        p.smem_lower_bound = p.dynamic_smem
    p.objectives = {"ring_depth_total": sum(depths.values()),
                    "register_total": sum(r.warps * budgets[r.inst.name] for r in ch.roles),
                    "footprint": p.dynamic_smem, "warps": p.warps}
    return p


# Each satisfiability question asked while optimising may use this much of Z3's resource
# counter (deterministic, unlike a timeout: the same inputs give the same placement on any
# machine); about a second of CPU on the larger benchmark compositions. Tie-breaks get less.
CHECK_RLIMIT = 4_000_000
TIEBREAK_RLIMIT = 1_000_000
MAX_UNKNOWN = 2  # inconclusive answers tolerated per objective before keeping the best found


def _optimize(z3, constraints, objectives, timeout_ms, *, ctx=None, tiebreaks: int = 1, hints=(), stats=None,
              start=()):
    """Lexicographic optimum; returns (model or None, proven, status).

    `objectives` holds (sense, expr) or (sense, expr, ideal) in priority order, `ideal` being
    a value no solution beats; the last `tiebreaks` of them do not count towards `proven`.
    Each objective in turn is pushed from the best value found towards its ideal (tried
    first, when given) by galloping and then bisection, each step one plain satisfiability
    check on an incremental solver, and then fixed. (z3.Optimize's OMT search needed minutes,
    or gave up at its timeout, on compositions of a few roles: six one-warp roles, or three
    4-warp ones with free register budgets; these checks take milliseconds.) A check that
    runs out of CHECK_RLIMIT proves nothing: the objective keeps the best value found and
    `proven` is False. `hints` ((variable, value) pairs, e.g. a greedy placement) seed the
    search for the first solution. `stats` (a dict) receives each objective's proven bound
    ("bounds", None where nothing was proven) and Z3's resource count ("work"). `start`
    (constraints, e.g. a greedy placement's values) gives the first solution when they hold."""
    s = z3.SimpleSolver(ctx=ctx)  # the incremental SMT core (the one that takes initial values)
    s.add(*constraints)
    if hasattr(s, "set_initial_value"):  # z3 >= 4.13
        for var, v in hints:
            s.set_initial_value(var, v)
    deadline = time.monotonic() + timeout_ms / 1000

    def check(extra=None, rlimit: int = 0):
        left = deadline - time.monotonic()
        if left <= 0:
            return z3.unknown, None
        s.set("timeout", int(left * 1000) + 1)
        s.set("rlimit", rlimit)
        if extra is not None:
            s.push()
            s.add(extra)
        res = s.check()
        model = s.model() if res == z3.sat else None
        if extra is not None:
            s.pop()
        return res, model

    res, model = check(z3.And(*start), CHECK_RLIMIT) if start else (z3.unknown, None)
    if res != z3.sat:
        res, model = check()
    if res == z3.unsat:
        return None, True, "unsat"
    if res != z3.sat:
        return None, False, "unknown"
    proven = True
    if stats is not None:
        stats["bounds"] = []
    for n, (sense, expr, *ideal) in enumerate(objectives):
        tiebreak = n >= len(objectives) - tiebreaks
        rlimit = TIEBREAK_RLIMIT if tiebreak else CHECK_RLIMIT
        value = lambda m: m.eval(expr, model_completion=True).as_long()  # noqa: E731
        better = (lambda t: expr >= t) if sense == "max" else (lambda t: expr <= t)
        sign = 1 if sense == "max" else -1
        best, bound, unknowns = value(model), None, 0
        refuted = None  # a bound proven by an unsat check (no solution beats it), for the gap
        if ideal and (ideal[0] - best) * sign <= 0:
            bound = best  # already at the ideal
        elif ideal:  # the ideal (a value nothing beats) is often reachable: try it first
            res, m = check(better(ideal[0]), rlimit)
            if res == z3.sat:
                model, best, bound = m, value(m), ideal[0]
            elif res == z3.unsat:
                bound = refuted = ideal[0] - sign
            else:
                unknowns += 1
        step = 1
        while bound is None:  # gallop: best + 1, + 2, + 4, ... until a target fails
            res, m = check(better(best + sign * step), rlimit)
            if res == z3.sat:
                model, best, step = m, value(m), 2 * step
            else:
                bound = best + sign * (step - 1)
                unknowns += res != z3.unsat
                if res == z3.unsat:
                    refuted = bound
        while best != bound and unknowns <= MAX_UNKNOWN:  # bisect (best, bound]
            mid = (best + bound + 1) // 2 if sense == "max" else (best + bound) // 2
            res, m = check(better(mid), rlimit)
            if res == z3.sat:
                model, best = m, value(m)
                if (best - bound) * sign >= 0:  # past a bound an inconclusive check set
                    bound = best
            else:
                bound = mid - sign
                unknowns += res != z3.unsat
                if res == z3.unsat:
                    refuted = bound
        if (unknowns or best != bound) and not tiebreak:
            proven = False
        if stats is not None:  # proven: the value found is itself the bound
            stats["bounds"].append(best if not (unknowns or best != bound) else refuted)
        s.add(expr == best)
    if stats is not None:
        stats["work"] = _work(s)
    return model, proven, "sat"


def _work(s) -> int:
    """Z3's resource counter for this solver's context: deterministic effort."""
    st = s.statistics()
    return int(st.get_key_value("rlimit count")) if "rlimit count" in st.keys() else 0


def _solve_smem(ch: Checked, cap: int, timeout_ms: int):
    import z3

    # A fresh context: Z3's search depends on its term table, so reusing the global one would
    # let an earlier solve in the same process change this one's answer.
    ctx = z3.Context()

    depth = {r.name: z3.Int(f"depth.{r.name}", ctx) for r in ch.rings}
    cons = [z3.And(depth[r.name] >= r.depth[0], depth[r.name] <= r.depth[1]) for r in ch.rings]
    off, size, kvar = {}, {}, {}
    for c in ch.claims:
        k = kvar[c.key] = z3.Int(f"k.{c.key}", ctx)
        off[c.key] = c.align * k
        cons.append(k >= 0)
        size[c.key] = c.bytes + (c.per_depth * depth[c.ring] if c.ring else 0)
    footprint = z3.Int("footprint", ctx)
    cons += [off[c.key] + size[c.key] <= footprint for c in ch.claims]
    cons += [footprint <= cap, footprint >= 0]
    claims = ch.claims
    for i in range(len(claims)):
        for j in range(i + 1, len(claims)):
            a, b = claims[i], claims[j]
            if _phases_meet(a, b):
                cons.append(z3.Or(off[a.key] + size[a.key] <= off[b.key], off[b.key] + size[b.key] <= off[a.key]))
    # Implied bounds, so that proving a footprint optimal needs no case split. The claims alive
    # in one phase (with the kernel-long ones) are pairwise disjoint; those among them aligned
    # to A or more also start in different A-byte slots, a claim of s bytes taking ceil(s/A)
    # of them, so the footprint reaches at least A x (slots - 1) + 1.
    for phase in sorted({c.phase for c in claims if c.phase != "kernel"}) or ["kernel"]:
        alive = [c for c in claims if c.phase in ("kernel", phase)]
        if alive:
            cons.append(footprint >= z3.Sum(*[size[c.key] for c in alive]))
        for a in sorted({c.align for c in alive if c.align > 1}):
            big = [c for c in alive if c.align >= a]
            fixed = sum(-(-c.bytes // a) * a for c in big if not c.ring)
            cons.append(footprint >= z3.Sum(z3.IntVal(fixed - a + 1, ctx), *[size[c.key] for c in big if c.ring]))
    # A greedy placement with every ring at its deepest proves the depth objective at its
    # ideal, which fixes every claim's size, and so the footprint's lower bound; it also seeds
    # Z3's search (finding any placement of ~70 claims from scratch took Z3 13 s).
    deepest = {r.name: r.depth[1] for r in ch.rings}
    greedy, floor = _greedy(ch, cap, deepest), None
    if greedy is not None:
        cons += [depth[name] == d for name, d in deepest.items()]
        floor = smem_lower_bound(claims, {c.key: c.bytes + c.per_depth * deepest.get(c.ring, 0) for c in claims})
    else:  # deepen one ring at a time, in declaration order, while the greedy placement fits
        depths = {r.name: r.depth[0] for r in ch.rings}
        greedy = _greedy(ch, cap, depths) or {}
        for r in ch.rings if greedy else ():
            for d in range(r.depth[0] + 1, r.depth[1] + 1):
                deeper = _greedy(ch, cap, {**depths, r.name: d})
                if deeper is None:
                    break
                depths[r.name], greedy = d, deeper
        deepest = depths if greedy else {}
    hints = [(depth[name], d) for name, d in deepest.items()] + [(kvar[c.key], o // c.align) for c in claims
                                                                  if (o := greedy.get(c.key)) is not None]
    # Past a few hundred claims Z3 may not find the hinted placement by itself: where the
    # depths are still open, start from the greedy placement outright.
    start = [] if floor is not None else [var == v for var, v in hints]
    n = len(claims)
    objectives = [("max", z3.Sum(*depth.values()) if depth else z3.IntVal(0, ctx), sum(r.depth[1] for r in ch.rings)),
                  ("min", footprint, *([floor] if floor is not None else [])),
                  # Tie-break: earlier-declared claims get lower offsets.
                  ("min", z3.Sum(*[(n - i) * off[c.key] for i, c in enumerate(claims)]) if claims else z3.IntVal(0, ctx))]
    stats = {}
    model, _, status = _optimize(z3, cons, objectives, timeout_ms, ctx=ctx, hints=hints,
                                 stats=stats, start=start)
    if status == "unsat":
        raise _infeasible(ch, {"smem"}, cap)
    if model is None:
        raise reject("L-SOLVE", f"the solver found no shared-memory placement within {timeout_ms} ms",
                     hint="simplify the composition")
    val = lambda e: model.eval(e, model_completion=True).as_long()  # noqa: E731
    offsets = {c.key: val(off[c.key]) for c in claims}
    sizes = {c.key: size[c.key] if isinstance(size[c.key], int) else val(size[c.key]) for c in claims}
    bound = max(smem_lower_bound(claims, sizes), stats["bounds"][1] or 0)
    reached = [val(objectives[0][1]), val(footprint)]
    unproven = [name for name, b, v in zip(("ring depths", "footprint"), [stats["bounds"][0], bound], reached) if b != v]
    depth_bound = stats["bounds"][0] if stats["bounds"][0] is not None else objectives[0][2]
    return (offsets, sizes, {k: val(v) for k, v in depth.items()}), unproven, (bound, depth_bound), stats["work"]


def _greedy(ch: Checked, cap: int, depths: dict[str, int]) -> dict[str, int] | None:
    """A first-fit placement at the given ring depths, or None where it does not fit: the
    kernel-long claims first, then each phase's, each group by largest alignment, then size.
    Claims whose sizes are multiples of their alignment pack without padding, so each phase
    sits right on top of the kernel-long claims and the footprint often meets the lower bound."""
    order = sorted(ch.claims, key=lambda c: (c.phase != "kernel", c.phase, -c.align, -_sized(c, depths)))
    return _first_fit_offsets(order, depths, cap)


def _sized(c: Claim, depths: dict[str, int]) -> int:
    return c.bytes + (c.per_depth * depths[c.ring] if c.ring else 0)


def _first_fit_offsets(claims: list[Claim], depths: dict[str, int], cap: int) -> dict[str, int] | None:
    """Each claim in the given order at the lowest aligned offset clear of the claims placed
    before it that share a phase with it; None where one would end past `cap`."""
    placed, offsets = [], {}
    for c in claims:
        o, sz = 0, _sized(c, depths)
        while True:
            o = -(-o // c.align) * c.align
            clash = next((e for (s, e, other) in placed if _phases_meet(c, other) and o < e and s < o + sz), None)
            if clash is None:
                break
            o = clash
        if o + sz > cap:
            return None
        placed.append((o, o + sz, c))
        offsets[c.key] = o
    return offsets


def _solve_warps(ch: Checked, timeout_ms: int):
    """Warp ranges and register budgets, for each block size (warp groups) that can hold the
    roles; the block size fixes the launch register pool, so each try is a small linear
    problem. Best: most registers for the roles, then fewest warps."""
    import z3

    ctx = z3.Context()  # see _solve_smem
    roles = ch.roles
    need = sum(r.warps for r in roles)
    g_min = max(1, -(-need // 4))
    # Warp-group-aligned roles start in different warp groups.
    g_aligned = sum(-(-r.warps // 4) for r in roles if r.aligned)
    # No block size can give the roles more than their maxima, nor more than 4 warps x the
    # pool's registers per warp group: stop once the best found reaches that.
    ceiling = sum(r.warps * r.regs[1] for r in roles)
    best, any_layout, proven_all, work = None, False, True, 0
    for groups in range(g_min, MAX_WARPS // 4 + 1):
        if groups < g_aligned:
            continue
        if best is not None and best[0] >= min(ceiling, max(register_pool(g) // 32 for g in range(groups, MAX_WARPS // 4 + 1))):
            break
        begin = {r.inst.name: z3.Int(f"warp.{r.inst.name}", ctx) for r in roles}
        budget = {r.inst.name: 8 * z3.Int(f"regs8.{r.inst.name}", ctx) for r in roles}
        layout = []
        for r in roles:
            n = r.inst.name
            layout += [begin[n] >= 0, begin[n] + r.warps <= 4 * groups]
            if r.aligned:
                layout.append(begin[n] % 4 == 0)
        for i in range(len(roles)):
            for j in range(i + 1, len(roles)):
                a, b = roles[i].inst.name, roles[j].inst.name
                layout.append(z3.Or(begin[a] + roles[i].warps <= begin[b], begin[b] + roles[j].warps <= begin[a]))
        probe = z3.Solver(ctx=ctx)
        probe.set("timeout", timeout_ms)
        probe.add(*layout)
        if probe.check() != z3.sat:
            continue
        any_layout = True
        regs = []
        group_budget = [z3.Int(f"group_regs.{g}", ctx) for g in range(groups)]
        for r in roles:
            lo, hi = r.regs
            regs.append(z3.And(budget[r.inst.name] >= max(lo, MIN_BUDGET), budget[r.inst.name] <= hi))
        for g, gb in enumerate(group_budget):
            covers = []
            for r in roles:
                n = r.inst.name
                cov = z3.And(begin[n] < 4 * (g + 1), begin[n] + r.warps > 4 * g)
                covers.append(cov)
                regs.append(z3.Implies(cov, gb == budget[n]))
            regs.append(z3.Or(z3.Or(*covers) if covers else z3.BoolVal(False, ctx), gb == MIN_BUDGET))
        regs.append(z3.Sum(*[128 * gb for gb in group_budget]) <= register_pool(groups))
        reg_total = z3.Sum(*[r.warps * budget[r.inst.name] for r in roles]) if roles else z3.IntVal(0, ctx)
        # Implied: a warp group holds 4 warps at its one budget (lets the solver bound the total).
        regs.append(reg_total <= 4 * z3.Sum(*group_budget))
        objectives = [("max", reg_total, min(ceiling, register_pool(groups) // 32)),
                      # Among equal totals, spread registers across roles (each role's own
                      # budget counts once) rather than starving the small ones.
                      ("max", z3.Sum(*budget.values()) if roles else z3.IntVal(0, ctx)),
                      # Tie-break: earlier-listed roles get lower warps.
                      ("min", z3.Sum(*[(len(roles) - i) * begin[r.inst.name] for i, r in enumerate(roles)])
                       if roles else z3.IntVal(0, ctx))]
        stats = {}
        model, proven, status = _optimize(z3, layout + regs, objectives, timeout_ms, ctx=ctx, stats=stats)
        work = max(work, stats.get("work", 0))  # one context: its counter only grows
        if model is None:
            proven_all &= status == "unsat"
            continue
        proven_all &= proven
        val = lambda e, m=model: m.eval(e, model_completion=True).as_long()  # noqa: E731
        total = val(reg_total)
        if best is None or total > best[0]:  # ties keep the smaller block
            best = (total, ({n: val(v) for n, v in begin.items()}, {n: val(v) for n, v in budget.items()},
                            [val(gb) for gb in group_budget]))
        if need == 0:
            break
    if best is None:
        raise _infeasible(ch, {"regs"} if any_layout else {"warps"}, 0)
    return best[1], proven_all, work


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
    return reject("L-SOLVE", "no placement satisfies the ring depth ranges", facts=[Fact("core", ", ".join(sorted(core)))],
                  hint="widen the rings' depth ranges or shrink the claims named above")


def first_fit(ch: Checked, depths: dict[str, int]) -> int | None:
    """Baseline: place claims in declaration order at the lowest aligned free offset.

    Returns the footprint, or None when it does not fit. Used to show what the solver buys.
    """
    offsets = _first_fit_offsets(list(ch.claims), depths, dynamic_capacity(ch))
    if offsets is None:
        return None
    return max((offsets[c.key] + _sized(c, depths) for c in ch.claims), default=0)
