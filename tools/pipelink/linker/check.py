"""Check pass: contracts against each other -> a `Checked` kernel ready to solve.

Pairs every import with an export, every ring's producer with its consumer, every read
fact with its one owner, and collects the SM resources to place. All conflicts found are
reported together, each naming both sides with file:line.

check() is the single entry. Facts, parameters, host providers, workspaces, rings and
resources are checked here; tensor and callable bindings in check_bindings.py; the result
types (Checked and what it holds) are in check_types.py.
"""

from __future__ import annotations

import difflib

from pipelink.common.diagnostics import Fact, Rejected
from pipelink.common.expr import ExprError, evaluate, names_in
from pipelink.linker.check_bindings import check_callables, check_library_barriers, check_library_warps, check_tensors
from pipelink.linker.arch_limits import SMEM_CAPACITY
from pipelink.linker.check_types import Barrier, Checked, Claim, Diags, Ring, Role, Transfer
from pipelink.linker.compose import Composition, Instance
from pipelink.linker.contract import MBARRIER_COUNT_MAX
from pipelink.linker.contract_types import fact_text
from pipelink.linker.kernel_rules import check_binds, check_grid, check_param_fact_names, check_resident
from pipelink.linker.kernel_rules import side_of as _side
from pipelink.linker.grid_limits import check_grid_limits, check_workspace_sizes

DTYPE_BYTES = {"f32": 4, "u32": 4, "i32": 4, "f16": 2, "bf16": 2, "u8": 1, "e4m3": 1, "e5m2": 1}


def check(comp: Composition) -> Checked:
    d = Diags()
    _check_arch(comp, d)
    params = _check_params(comp, d)
    facts, owner = _check_facts(comp, d)
    check_param_fact_names(comp, params, facts, owner, d.items)
    check_grid(comp, params, facts, d.items)
    check_grid_limits(comp, facts, d.items)
    check_workspace_sizes(comp, facts, owner, d.items)
    check_resident(comp, d.items)
    binds = check_binds(comp, d.items)
    ev = _evaluator(dict(facts), d)
    roles = _check_roles(comp, d)
    rings = _check_rings(comp, d, ev)
    claims, barriers = _instance_claims(comp, d, ev, roles)
    for r in rings:
        claims.append(Claim(f"ring.{r.name}.buffer", 0, r.align, "kernel", r.name, r.stage_bytes, r.origin))
        claims.append(Claim(f"ring.{r.name}.full", 0, 8, "kernel", r.name, 8, r.origin))
        claims.append(Claim(f"ring.{r.name}.empty", 0, 8, "kernel", r.name, 8, r.origin))
    transfers = check_tensors(comp, d, ev, binds)
    _staging_claims(transfers, claims, barriers)
    calls = check_callables(comp, d, binds)
    check_library_warps(comp, transfers, calls, d)
    check_library_barriers(transfers, calls, d)

    if len(barriers) > 15:
        d.add("L-BARRIER", f"{len(barriers)} named barriers are needed; ids 1..15 are free",
              facts=[Fact(b.key, f"{b.threads} threads", b.origin) for b in barriers],
              hint="share a barrier between phases, or use mbarriers")
    static = sum(p.measured.static_smem for p in comp.packages())
    capacity = SMEM_CAPACITY.get(comp.arch, 232448)
    if d.items:
        raise Rejected(d.items)
    return Checked(comp, facts, owner, roles, rings, claims, barriers, transfers, calls, params, static, capacity)


def _evaluator(env: dict, d: Diags):
    """ev(expr, inst, clause, origin, hi): the expression's value over the facts, in 1..hi; else
    None, with C-EXPR added."""
    def ev(expr, inst: Instance, clause: str, origin, hi: int = 2**32 - 1) -> int | None:
        try:
            v = evaluate(expr, env)
        except ExprError as e:
            d.add("C-EXPR", f"{_side(inst)}: {clause}: {e}", clause=clause,
                  facts=[Fact(_side(inst), f"{expr!r}", str(origin))],
                  hint="an expression may use only integers and facts the contract declares (own or read)")
            return None
        if not 0 < v <= hi:  # every expression is a size or an extent, held in a u32 (or a narrower field)
            bound = "a size must be positive and below 2^32" if hi == 2**32 - 1 else f"it must be in 1..{hi}"
            d.add("C-EXPR", f"{_side(inst)}: {clause}: {expr!r} is {v}; {bound}", clause=clause,
                  facts=[Fact(_side(inst), f"{expr!r} = {v}", str(origin))],
                  hint="check the facts the expression reads" + ("" if hi == 2**32 - 1 else
                                                                 " (an mbarrier counts at most 2^20-1 arrivals)"))
            return None
        return v

    return ev


def _check_roles(comp: Composition, d: Diags) -> list[Role]:
    """The role instances (the dispatcher's warps): at least one, 32 warps at most between them."""
    roles = []
    for i in comp.instances:
        c = i.contract
        if c.role:
            measured = i.package.measured.regs.get(f"pl_{c.name}__entry__{c.entry}", 0)
            roles.append(Role(i, c.role.warps, c.role.warpgroup_aligned, c.role.regs, measured))
    if not roles:
        d.add("L-ROLE", f"kernel {comp.name} has no role component", clause="instance",
              facts=[Fact(f"kernel {comp.name}", "instances: " + ", ".join(_side(i) for i in comp.instances), comp.file)],
              hint='at least one component must have kind = "role" so the dispatcher has warps to run')
    total_warps = sum(r.warps for r in roles)
    if total_warps > 32:
        d.add("L-WARPS", f"the roles need {total_warps} warps; a block has at most 32",
              facts=[Fact(_side(r.inst), f"role.warps = {r.warps}", str(r.inst.contract.role.origin)) for r in roles],
              hint="use fewer or smaller roles")
    return roles


def _instance_claims(comp: Composition, d: Diags, ev, roles: list[Role]) -> tuple[list[Claim], list[Barrier]]:
    """Each instance's shared memory claims and named barriers, its thread counts checked."""
    total_warps = sum(r.warps for r in roles)
    claims: list[Claim] = []
    barriers: list[Barrier] = []
    for i in comp.instances:
        c = i.contract
        for s in c.smem:
            b = ev(s.bytes, i, f"smem.{s.name}.bytes", s.origin)
            if b is not None:
                claims.append(Claim(f"{i.name}.smem.{s.name}", b, s.align, s.phase, origin=f"{_side(i)} at {s.origin}"))
        for b in c.barriers:
            threads = 32 * c.role.warps if b.threads == "role" else int(b.threads)
            if threads % 32 or threads <= 0 or threads > 1024:
                d.add("L-BARRIER-THREADS", f"{_side(i)}: barrier {b.name} counts {threads} threads",
                      clause=f"barrier.{b.name}",
                      facts=[Fact(_side(i), f"threads = {b.threads!r}", str(b.origin))],
                      hint="bar.sync counts whole warps: use a multiple of 32 up to 1024")
            elif roles and total_warps <= 32 and threads > 32 * total_warps:  # could never complete: a hang
                d.add("L-BARRIER-THREADS", f"{_side(i)}: barrier {b.name} counts {threads} threads, but the "
                      f"kernel's roles have {32 * total_warps}", clause=f"barrier.{b.name}",
                      facts=[Fact(_side(i), f"threads = {b.threads!r}", str(b.origin)),
                             *(Fact(_side(r.inst), f"role.warps = {r.warps}", str(r.inst.contract.role.origin))
                               for r in roles)],
                      hint="a named barrier waits for its count of threads: count only threads that reach it")
            barriers.append(Barrier(f"{i.name}.{b.name}", threads, f"{_side(i)} at {b.origin}"))
    return claims, barriers


def _staging_claims(transfers: list[Transfer], claims: list[Claim], barriers: list[Barrier]) -> None:
    """A staged transfer's shared buffer, and its named barrier unless it is warp-scoped."""
    for t in transfers:
        if t.kind == "staged":
            # A warp-scoped tile is staged per warp (each warp of the role may export its own);
            # a wider scope stages once and synchronises on a solver-placed named barrier.
            copies = t.exporter.contract.role.warps if t.export.scope == "warp" else 1
            where = f"{_side(t.exporter)} at {t.export.origin} -> {_side(t.importer)} at {t.imp.origin}"
            claims.append(Claim(f"transfer.{t.key}", t.elements * DTYPE_BYTES[t.export.dtype] * copies, 16, "kernel",
                                origin=where))
            if t.export.scope != "warp":
                barriers.append(Barrier(f"transfer.{t.key}", t.threads, where))


def _check_arch(comp: Composition, d: Diags):
    for i in comp.instances:
        c = i.contract
        if c.arch != comp.arch:
            d.add("L-ARCH", f"{_side(i)} was built for {c.arch}, the kernel links for {comp.arch}",
                  clause="component.arch",
                  facts=[Fact(_side(i), f"arch = {c.arch!r}", str(c.origin)),
                         Fact(f"kernel {comp.name}", f"arch = {comp.arch!r}", comp.file)],
                  hint=f"rebuild {c.name} for {comp.arch} (one source can serve several archs)")
    versions = {i.package.measured.toolkit for i in comp.instances}
    if len({v.split(".")[0] for v in versions}) > 1:
        d.add("L-ARCH", "packages were built by different CUDA majors: " + ", ".join(sorted(versions)),
              facts=[Fact(_side(i), f"toolkit {i.package.measured.toolkit}") for i in comp.instances],
              hint="LTO-IR does not link across CUDA majors: rebuild all components with one toolkit")


def _check_params(comp: Composition, d: Diags) -> dict[str, str]:
    seen: dict[str, tuple[str, Instance]] = {}
    for i in comp.instances:
        for name, t in i.contract.params:
            if name in seen and seen[name][0] != t:
                other = seen[name][1]
                d.add("L-PARAMS", f"parameter {name!r} is {seen[name][0]} for {_side(other)} but {t} for {_side(i)}",
                      clause=f"params.{name}",
                      facts=[Fact(_side(other), f"{name} = {seen[name][0]!r}", str(other.contract.param_origin(name))),
                             Fact(_side(i), f"{name} = {t!r}", str(i.contract.param_origin(name)))],
                      hint="one name is one host value: rename one of them or agree on the type")
            seen.setdefault(name, (t, i))
    _check_host(comp, d)
    check_shared_workspaces(comp, d)
    return {k: v[0] for k, v in seen.items()}


def check_shared_workspaces(comp: Composition, d: Diags) -> None:
    """Every declaration of a kernel-scope workspace agrees on its size expression, zero and
    alignment (they are one buffer), and no instance-scope workspace takes its name."""
    by_name: dict[str, list[tuple[Instance, object]]] = {}
    for i in comp.instances:
        for w in i.contract.workspaces:
            by_name.setdefault(w.name, []).append((i, w))
    for name, decls in sorted(by_name.items()):
        shared = [(i, w) for i, w in decls if w.scope == "kernel"]
        if not shared:
            continue
        forms = {(i.name, w.scope, " ".join(str(w.bytes).split()), w.zero, w.align) for i, w in decls}
        if len({f[1:] for f in forms}) > 1:
            d.add("L-WORKSPACE", f"kernel-scope workspace {name!r} is declared differently by "
                  f"{len(decls)} instances", clause=f"workspace.{name}",
                  facts=[Fact(_side(i), f"scope = {w.scope!r}, bytes = {str(w.bytes)!r}, zero = {w.zero}, "
                              f"align = {w.align}", str(w.origin)) for i, w in decls],
                  hint="a kernel-scope workspace is one buffer: every declaring contract states the same "
                       "scope, bytes expression, zero and align")


def _check_host(comp: Composition, d: Diags) -> None:
    """Each provided parameter region has exactly one host provider in the kernel."""
    fillers: dict[str, list[Instance]] = {}
    for i in comp.instances:
        for name in (i.contract.host.fills if i.contract.host else ()):
            fillers.setdefault(name, []).append(i)
    for name, insts in sorted(fillers.items()):
        if len(insts) > 1:
            d.add("L-HOST", f"parameter {name!r} is filled by {len(insts)} host providers",
                  clause=f"params.{name}",
                  facts=[Fact(_side(i), f"[host] fills {name!r} ({i.contract.host.provider})",
                              str(i.contract.host.origin)) for i in insts],
                  hint="a parameter region has one provider: rename the tmap parameter in one contract")


def _check_kernel_facts(comp: Composition, owners, readers, facts, owner, d: Diags) -> None:
    """[fact.X] own = V in the kernel file: the kernel is the owner; readers as for a component owner.
    A kernel fact nothing reads (no contract, no grid) is a misspelling or a stale model setting."""
    kernel = f"kernel {comp.name}"
    in_grid = set().union(*(names_in(g) for g in comp.grid if isinstance(g, str)))
    for kf in comp.facts:
        name, mine = kf.name, Fact(kernel, kf.own_text(), str(kf.value_origin or kf.origin))
        if name in KERNEL_FACTS:
            d.add("L-FACT-OWNERS", f"fact {name!r} is the kernel's cluster shape; [fact.{name}] cannot own it",
                  clause=f"fact.{name}", facts=[mine], hint=f"set [kernel] cluster and drop [fact.{name}]")
            continue
        facts[name], owner[name] = kf.own, None
        others = owners.pop(name, [])
        if others:
            d.add("L-FACT-OWNERS", f"fact {name!r} is owned by the kernel file and by "
                  + ", ".join(_side(i) for i, _ in others),
                  clause=f"fact.{name}", facts=[mine] + [Fact(_side(i), f.own_text(), str(f.origin)) for i, f in others],
                  hint=f"a fact has one owner: drop [fact.{name}] from the kernel file, or make the component a reader")
        rs = readers.pop(name, [])
        if not rs and name not in in_grid:
            read = sorted({f.name for i in comp.instances for f in i.contract.facts if f.own is None} - KERNEL_FACTS_SET)
            near = difflib.get_close_matches(name, read, 1)
            d.add("L-FACT-UNREAD", f"the kernel file owns fact {name!r}, but no component (nor the grid) reads it",
                  clause=f"fact.{name}",
                  facts=[mine, Fact(kernel, "facts read: " + (", ".join(read) or "none"), comp.file)],
                  hint=(f"did you mean {near[0]!r}? " if near else "") + f"remove [fact.{name}] from the kernel file, "
                       "or add the component that reads it")
        _check_readers(d, name, kernel, kf, rs)


def _check_readers(d: Diags, name: str, owner_side: str, of, rs) -> None:
    """Each reader states the owner's type and accepts its value."""
    for i, f in rs:
        if f.type != of.type:
            d.add("L-FACT-TYPE", f"fact {name!r} is {of.type} at its owner but {f.type} at {_side(i)}",
                  clause=f"fact.{name}.type",
                  facts=[Fact(owner_side, f"type = {of.type!r}", str(of.origin)),
                         Fact(_side(i), f"type = {f.type!r}", str(f.origin))],
                  hint="owner and readers must state the same type")
        elif not f.accepts(of.own):
            d.add("L-FACT-ACCEPT", f"{_side(i)} cannot accept {name} = {fact_text(of.type, of.own)} from {owner_side}",
                  clause=f"fact.{name}",
                  facts=[Fact(owner_side, of.own_text(), str(of.value_origin or of.origin)),
                         Fact(_side(i), f.accept_text(), str(f.value_origin or f.origin))],
                  hint=f"change the owner's {name}, or widen what {i.package.name} accepts (and support it)")


# Facts the kernel file owns: its cluster shape ([kernel] cluster), for components that
# multicast or synchronise across the CTAs of a cluster.
KERNEL_FACTS = ("cluster_x", "cluster_y", "cluster_z")
KERNEL_FACTS_SET = frozenset(KERNEL_FACTS)


def _check_facts(comp: Composition, d: Diags):
    owners: dict[str, list[tuple[Instance, object]]] = {}
    readers: dict[str, list[tuple[Instance, object]]] = {}
    for i in comp.instances:
        for f in i.contract.facts:
            (owners if f.own is not None else readers).setdefault(f.name, []).append((i, f))
    facts, owner = {}, {}
    for name in KERNEL_FACTS:
        for i, f in owners.pop(name, []):
            d.add("L-FACT-OWNERS", f"fact {name!r} is the kernel's cluster shape; {_side(i)} cannot own it",
                  clause=f"fact.{name}", facts=[Fact(_side(i), f.own_text(), str(f.origin))],
                  hint="read it (accept = [...]) and set [kernel] cluster in the kernel file")
        value = comp.cluster[KERNEL_FACTS.index(name)]
        for i, f in readers.pop(name, []):
            facts[name], owner[name] = value, None
            if f.type != "u32":
                d.add("L-FACT-TYPE", f"fact {name!r} is u32 (the kernel's cluster) but {f.type} at {_side(i)}",
                      clause=f"fact.{name}.type",
                      facts=[Fact(f"kernel {comp.name}", f"cluster = {list(comp.cluster)}", comp.file),
                             Fact(_side(i), f"type = {f.type!r}", str(f.origin))],
                      hint='the cluster shape is u32: remove the type or write type = "u32"')
            elif not f.accepts(value):
                d.add("L-FACT-ACCEPT", f"{_side(i)} cannot accept {name} = {value} (the kernel's cluster)",
                      clause=f"fact.{name}",
                      facts=[Fact(f"kernel {comp.name}", f"cluster = {list(comp.cluster)}", comp.file),
                             Fact(_side(i), f.accept_text(), str(f.origin))],
                      hint="change [kernel] cluster, or use a component that supports this cluster shape")
    _check_kernel_facts(comp, owners, readers, facts, owner, d)
    for name, os_ in owners.items():
        if len(os_) > 1:
            d.add("L-FACT-OWNERS", f"fact {name!r} has {len(os_)} owners",
                  clause=f"fact.{name}",
                  facts=[Fact(_side(i), f.own_text(), str(f.origin)) for i, f in os_],
                  hint="a fact has one owner; make the others readers (accept = [...])")
        i, f = os_[0]
        facts[name], owner[name] = f.own, i
    for name, rs in readers.items():
        if name not in facts:
            d.add("L-FACT-OWNERS", f"fact {name!r} is read but no component owns it",
                  clause=f"fact.{name}",
                  facts=[Fact(_side(i), f"reads {name} ({f.accept_text()})", str(f.origin)) for i, f in rs],
                  hint=f"add the component that owns {name} to the kernel")
            continue
        oi = owner[name]
        _check_readers(d, name, _side(oi), oi.contract.fact(name), rs)
    return facts, owner


def _check_rings(comp, d, ev) -> list[Ring]:
    sides: dict[str, dict[str, list]] = {}
    for i in comp.instances:
        for r in i.contract.rings:
            sides.setdefault(r.name, {"producer": [], "consumer": []})[r.side].append((i, r))
    rings = []
    for name, s in sides.items():
        prods, cons = s["producer"], s["consumer"]
        if len(prods) != 1 or len(cons) != 1:
            have = [Fact(_side(i), f"side = {r.side!r}", str(r.origin)) for i, r in prods + cons]
            missing = "producer" if not prods else "consumer" if not cons else None
            d.add("L-RING-SIDE",
                  f"ring {name!r} has no {missing}" if missing else
                  f"ring {name!r} has {len(prods)} producers and {len(cons)} consumers",
                  clause=f"ring.{name}", facts=have,
                  hint="a ring connects exactly one producer and one consumer instance")
            continue
        (pi, p), (ci, c) = prods[0], cons[0]
        ps = ev(p.stage_bytes, pi, f"ring.{name}.stage_bytes", p.origin)
        cs = ev(c.stage_bytes, ci, f"ring.{name}.stage_bytes", c.origin)
        if ps is not None and cs is not None and ps != cs:
            d.add("L-RING-STAGE", f"ring {name!r}: producer stages are {ps} bytes, consumer stages {cs}",
                  clause=f"ring.{name}.stage_bytes",
                  facts=[Fact(_side(pi), f"stage_bytes = {p.stage_bytes!r} = {ps}", str(p.origin)),
                         Fact(_side(ci), f"stage_bytes = {c.stage_bytes!r} = {cs}", str(c.origin))],
                  hint="both sides must agree on the stage layout (usually they read the same tile facts)")
        lo, hi = max(p.depth[0], c.depth[0]), min(p.depth[1], c.depth[1])
        if lo > hi:
            d.add("L-RING-DEPTH", f"ring {name!r}: depth ranges {list(p.depth)} and {list(c.depth)} do not intersect",
                  clause=f"ring.{name}.depth",
                  facts=[Fact(_side(pi), f"depth = {list(p.depth)}", str(p.origin)),
                         Fact(_side(ci), f"depth = {list(c.depth)}", str(c.origin))],
                  hint="widen one side's depth range")
        arrivals = {id(r): ev(r.arrivals, i, f"ring.{name}.arrivals", r.origin, MBARRIER_COUNT_MAX)
                    for i, r in ((pi, p), (ci, c))}
        for me, mine, other, theirs in ((pi, p, ci, c), (ci, c, pi, p)):
            if mine.peer_arrivals is None or arrivals[id(theirs)] is None:
                continue
            peer = ev(mine.peer_arrivals, me, f"ring.{name}.peer_arrivals", mine.origin, MBARRIER_COUNT_MAX)
            if peer is not None and peer != arrivals[id(theirs)]:
                d.add("L-RING-ARRIVALS",
                      f"ring {name!r}: {_side(me)} assumes {peer} arrivals from its peer, "
                      f"{_side(other)} makes {arrivals[id(theirs)]}",
                      clause=f"ring.{name}.arrivals",
                      facts=[Fact(_side(me), f"peer_arrivals = {mine.peer_arrivals!r} = {peer}", str(mine.origin)),
                             Fact(_side(other), f"arrivals = {theirs.arrivals!r} = {arrivals[id(theirs)]}",
                                  str(theirs.origin))],
                      hint="the barrier's count is the other side's arrivals; make them agree")
        if ps is not None and lo <= hi and None not in arrivals.values():
            rings.append(Ring(name, pi, ci, ps, (lo, hi), arrivals[id(p)], arrivals[id(c)], max(p.align, c.align),
                              f"producer {_side(pi)} at {p.origin}, consumer {_side(ci)} at {c.origin}"))
    return rings
