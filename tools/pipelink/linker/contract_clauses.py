"""One parser per contract clause: [component], [params], [role], [fact.X], [smem.X],
[barrier.X], [ring.X], [export.X]/[import.X], [host], [workspace.X], [callable.*.X].

Each takes the top-level reader (contract_reader.Reader) and returns typed declarations
(contract_types); `contract.contract_from_data` calls them in the order below, which is the
order their C-SCHEMA errors are found in. A clause that uses expressions takes the names of
the facts this contract declares, so an expression can only name those.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipelink.common.diagnostics import Fact, reject
from pipelink.common.expr import names_in, never_valid
from pipelink.linker.contract_reader import read_align, read_expr, read_ident, Reader, read_shape_entry, read_u32
from pipelink.linker.contract_types import (
    ARCHES, DTYPES, FACT_BOUNDS, FACT_TYPES, MAX_RANK, MBARRIER_COUNT_MAX, PARAM_TYPES, PROVIDED_TYPES, RUNTIME_NAMES,
    SCOPES, SPACES, U32_MAX, WORKSPACE_BUILTINS, WORKSPACE_SCOPES, BarrierClaim, CallableDecl, FactDecl, HostDecl,
    RingSide, RoleDecl, SmemClaim, TensorDecl, WorkspaceDecl,
)
from pipelink.linker.names import reserved_reason


def parse_component(top: Reader) -> tuple[str, str, str | None, str, bool]:
    """[component] -> (name, kind, entry, arch, co_resident)."""
    comp = top.table("component")
    if not comp.data:
        top.fail("component", "is required", hint="start the contract with [component] name = \"...\"")
    name = read_ident(comp, "name", comp.get("name", str))
    kind = comp.get("kind", str, "role")
    if kind not in ("role", "library"):
        comp.fail("kind", f"must be \"role\" or \"library\", not {kind!r}")
    entry = comp.get("entry", str, None)
    if kind == "role" and entry is None:
        comp.fail("entry", "is required for a role component", hint="name the PL_ENTRY(<entry>) function")
    if entry is not None:
        read_ident(comp, "entry", entry)
    arch = comp.get("arch", str, "sm_90a")
    co_resident = comp.get("co_resident", bool, False)
    if arch not in ARCHES:
        comp.fail("arch", f"unknown architecture {arch!r}", hint=f"one of {sorted(ARCHES)}")
    comp.finish()
    return name, kind, entry, arch, co_resident


def parse_params(top: Reader):
    """[params] -> ([(name, type)], [origin of each]), in the order written (the struct's order)."""
    params_r = top.table("params")
    params, param_origins = [], []
    for k, v in params_r.data.items():
        read_ident(params_r, k, k)
        if why := reserved_reason(k):  # a member of the generated parameter struct
            params_r.fail(k, why, hint="rename the parameter (and the member of the component's params struct)")
        if k in RUNTIME_NAMES:  # the caller's value would replace the device's in grids and workspace sizes
            params_r.fail(k, f"{k!r} is a value the runtime supplies (grids and workspace sizes read it)",
                          hint="rename the parameter; read the runtime's value through the grid instead")
        t = params_r.get(k, str)
        if t not in PARAM_TYPES:
            params_r.fail(k, f"unknown parameter type {t!r}", hint=f"one of {sorted(PARAM_TYPES)}")
        params.append((k, t))
        param_origins.append(params_r.origin(k))
    params_r.finish()
    return params, param_origins


def parse_role(top: Reader, kind: str) -> RoleDecl | None:
    """[role]: required for a role component, refused for a library."""
    role = None
    role_r = top.table("role")
    if kind == "role":
        if not role_r.data:
            top.fail("role", "is required for a role component", hint="add [role] warps = N")
        warps = role_r.get("warps", int)
        if not 1 <= warps <= 32:
            role_r.fail("warps", f"must be 1..32, not {warps}")
        wga = role_r.get("warpgroup_aligned", bool, False)
        regs = role_r.get("regs", list, [24, 256])
        if len(regs) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in regs):
            role_r.fail("regs", "must be [min, max]")
        lo, hi = regs
        if not (24 <= lo <= hi <= 256):
            role_r.fail("regs", f"[{lo}, {hi}] must satisfy 24 <= min <= max <= 256 (setmaxnreg limits)")
        role_r.finish()
        role = RoleDecl(warps, wga, (lo, hi), role_r.origin())
    elif role_r.data:
        top.fail("role", "a library component has no role", hint='set component.kind = "role" or remove [role]')
    return role


def parse_facts(top: Reader) -> list[FactDecl]:
    """[fact.X]: owned (`own`) or read (`accept` list or range), of one of FACT_TYPES."""
    facts = []
    facts_r = top.table("fact")
    for fname in facts_r.data:
        read_ident(facts_r, fname, fname)
        if fname in RUNTIME_NAMES:
            facts_r.fail(fname, f"{fname!r} is a value the runtime supplies, not a fact",
                         hint="rename the fact; a fact's value is fixed at link time")
        facts.append(parse_fact(facts_r.table(fname), fname))
    facts_r.finish()
    return facts


def parse_fact(fr: Reader, fname: str) -> FactDecl:
    """One [fact.X] table; values are held to the fact's type (a bool is stored as 0/1)."""
    ftype = fr.get("type", str, "u32")
    if ftype not in FACT_TYPES:
        fr.fail("type", f"unknown fact type {ftype!r}", hint=f"one of {sorted(FACT_TYPES)}")
    own = fr.get("own", _fact_value_type(ftype), None, what=_fact_value_what(ftype))
    if own is not None:
        own = _read_fact_value(fr, "own", own, ftype)
    accept = accept_range = None
    acc = fr.get("accept", (list, dict), None)
    if own is not None and acc is not None:
        fr.fail("accept", "an owned fact does not also accept values", hint="remove accept or own")
    if isinstance(acc, list):
        if not acc or not all(_is_fact_value(x, ftype) for x in acc):
            fr.fail("accept", "must be a non-empty list of " + ("true/false" if ftype == "bool" else "integers"),
                    hint="" if ftype == "bool" else 'a list of true/false needs type = "bool"')
        accept = tuple(_read_fact_value(fr, "accept", x, ftype) for x in acc)
    elif isinstance(acc, dict):
        if ftype == "bool":
            fr.fail("accept", "a bool fact accepts a list, not a range", hint="accept = [true] or accept = [false]")
        ar = fr.table("accept")
        lo_t, hi_t = FACT_BOUNDS[ftype]
        lo = _read_fact_value(ar, "min", ar.get("min", int, lo_t), ftype)
        hi = _read_fact_value(ar, "max", ar.get("max", int, hi_t), ftype)
        mult = read_u32(ar, "multiple_of", ar.get("multiple_of", int, 1), 1)
        if lo > hi:
            ar.fail("max", f"max = {hi} is below min = {lo}: no value would be accepted")
        if -(-lo // mult) * mult > hi:  # the first multiple of multiple_of from min on
            ar.fail("multiple_of", f"no multiple of {mult} lies in {lo}..{hi}: no value would be accepted",
                    hint="widen min..max to hold a multiple of multiple_of, or change multiple_of")
        ar.finish()
        accept_range = (lo, hi, mult)
    fr.finish()
    value_key = "own" if own is not None else "accept" if acc is not None else ""
    return FactDecl(fname, ftype, own, accept, accept_range, fr.origin(),
                    fr.origin(value_key) if value_key else None)


def _fact_value_type(ftype: str):
    return bool if ftype == "bool" else int


def _fact_value_what(ftype: str) -> str:
    return "true or false" if ftype == "bool" else ""  # "" keeps the reader's own wording


def _is_fact_value(x, ftype: str) -> bool:
    return isinstance(x, bool) if ftype == "bool" else isinstance(x, int) and not isinstance(x, bool)


def _read_fact_value(r: Reader, key: str, v, ftype: str) -> int:
    lo, hi = FACT_BOUNDS[ftype]
    if ftype != "bool" and not lo <= v <= hi:
        r.fail(key, f"must be in {lo}..{hi}, not {v}",
               hint=f"the range of a {ftype} fact" + (' (a larger value needs type = "u64", a negative one type = "i32")'
                                                      if ftype == "u32" else ""))
    return int(v)


def parse_smem(top: Reader, declared_facts: set[str]) -> list[SmemClaim]:
    """[smem.X] bytes/align/phase."""
    smem = []
    smem_r = top.table("smem")
    for sname in smem_r.data:
        read_ident(smem_r, sname, sname)
        sr = smem_r.table(sname)
        b = read_expr(sr, "bytes", facts=declared_facts)
        align = read_align(sr, 16)
        phase = sr.get("phase", str, "kernel")
        sr.finish()
        smem.append(SmemClaim(sname, b, align, phase, sr.origin()))
    smem_r.finish()
    return smem


def parse_barriers(top: Reader, kind: str) -> list[BarrierClaim]:
    """[barrier.X] threads: "role" (a role's own warps) or a count (a library has no role)."""
    barriers = []
    bar_r = top.table("barrier")
    for bname in bar_r.data:
        read_ident(bar_r, bname, bname)
        br = bar_r.table(bname)
        threads = br.get("threads", (str, int), "role")
        if isinstance(threads, str) and threads != "role":
            br.fail("threads", f"must be \"role\" or an integer, not {threads!r}")
        if kind == "library" and threads == "role":
            br.fail("threads", "a library component has no role; give a thread count")
        br.finish()
        barriers.append(BarrierClaim(bname, threads, br.origin()))
    bar_r.finish()
    return barriers


def parse_rings(top: Reader, declared_facts: set[str]) -> list[RingSide]:
    """[ring.X]: one side of a ring; check.py pairs it with the other side's contract."""
    rings = []
    ring_r = top.table("ring")
    for rname in ring_r.data:
        read_ident(ring_r, rname, rname)
        rr = ring_r.table(rname)
        side = rr.get("side", str)
        if side not in ("producer", "consumer"):
            rr.fail("side", f"must be \"producer\" or \"consumer\", not {side!r}")
        stage = read_expr(rr, "stage_bytes", facts=declared_facts)
        depth = rr.get("depth", (list, int))
        if isinstance(depth, int):
            depth = [depth, depth]
        if (len(depth) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in depth)
                or not 1 <= depth[0] <= depth[1] <= 64):
            rr.fail("depth", f"must be [min, max] with 1 <= min <= max <= 64, not {depth}")
        arrivals = read_expr(rr, "arrivals", facts=declared_facts, hi=MBARRIER_COUNT_MAX)
        peer = read_expr(rr, "peer_arrivals", None, facts=declared_facts, hi=MBARRIER_COUNT_MAX)
        ralign = read_align(rr, 128)
        rr.finish()
        rings.append(RingSide(rname, side, stage, (depth[0], depth[1]), arrivals, peer, ralign, rr.origin()))
    ring_r.finish()
    return rings


def parse_tensors(top: Reader, declared_facts: set[str]) -> list[TensorDecl]:
    """[export.X] then [import.X]: register tiles handed between components."""
    tensors = []
    for direction in ("export", "import"):
        tr_all = top.table(direction)
        for tname in tr_all.data:
            read_ident(tr_all, tname, tname)
            tr = tr_all.table(tname)
            shape = tr.get("shape", list)
            if not shape or not all(isinstance(x, (int, str)) and not isinstance(x, bool) for x in shape):
                tr.fail("shape", "must be a list of integers or expressions")
            if len(shape) > MAX_RANK:  # limits.py multiplies the extents into one expression
                tr.fail("shape", f"has {len(shape)} extents; a tile has at most {MAX_RANK}",
                        hint="flatten the tile's extents (the checks compare element counts and extents)")
            for x in shape:
                read_shape_entry(tr, x, declared_facts)
            dtype = tr.get("dtype", str)
            if dtype not in DTYPES:
                tr.fail("dtype", f"unknown dtype {dtype!r}", hint=f"one of {sorted(DTYPES)}")
            layout = tr.get("layout", str)
            space = tr.get("space", str, "reg")
            if space not in SPACES:
                tr.fail("space", f"unknown memory space {space!r}", hint=f"one of {sorted(SPACES)}")
            scope = tr.get("scope", str, "role")
            if scope not in SCOPES:
                tr.fail("scope", f"unknown scope {scope!r}", hint=f"one of {sorted(SCOPES)}")
            tr.finish()
            tensors.append(TensorDecl(tname, direction, tuple(shape), dtype, layout, space, scope, tr.origin()))
        tr_all.finish()
    return tensors


def parse_callables(top: Reader) -> list[CallableDecl]:
    """[callable.export.X] then [callable.import.X]: C function types, normalised."""
    callables = []
    cr_all = top.table("callable")
    for direction in ("export", "import"):
        cr_dir = cr_all.table(direction)
        for cname in cr_dir.data:
            read_ident(cr_dir, cname, cname)
            cr = cr_dir.table(cname)
            sig = cr.get("signature", str)
            if len(sig) > 1000 or not _SIGNATURE.fullmatch(normalize_signature(sig)):
                # The text is pasted into the generated C++ (the call thunk): only `ret(type, ...)`.
                cr.fail("signature", f"{sig[:80]!r} is not a C function type `ret(type, ...)`",
                        hint='e.g. "unsigned(unsigned, const void*, float*)": types are identifiers, `*`, `&` and '
                             "`const`; no names, defaults or other punctuation")
            cr.finish()
            callables.append(CallableDecl(cname, direction, normalize_signature(sig), cr.origin()))
        cr_dir.finish()
    cr_all.finish()
    return callables


def parse_workspaces(top: Reader, params: dict[str, str], facts: list[FactDecl]) -> tuple[WorkspaceDecl, ...]:
    """[workspace.X] bytes/zero/align; sizes may use integer params, facts and grid_x."""
    r = top.table("workspace")
    known = {f.name for f in facts} | {n for n, t in params.items() if t in ("u32", "i32", "u64")}
    out = []
    for wname in r.data:
        read_ident(r, wname, wname)
        wr = r.table(wname)
        size = read_expr(wr, "bytes")
        unknown = sorted(names_in(size) - known - set(WORKSPACE_BUILTINS)) if isinstance(size, str) else []
        if unknown:
            raise reject("C-EXPR", f"workspace.{wname}.bytes uses {unknown}, which this component does not declare",
                         clause=f"workspace.{wname}.bytes",
                         facts=[Fact(f"contract {Path(r.file).name}", f"bytes = {size!r}", str(wr.origin("bytes")))],
                         hint="a workspace size may use the component's facts, its u32/i32/u64 params and grid_x")
        why = never_valid(size, 0) if isinstance(size, str) else None
        if why:  # evaluated only at launch: refuse now what every launch would refuse
            raise reject("C-EXPR", f"workspace.{wname}.bytes: {why}", clause=f"workspace.{wname}.bytes",
                         facts=[Fact(f"contract {Path(r.file).name}", f"bytes = {size!r}", str(wr.origin("bytes")))],
                         hint="a workspace size is a byte count for the launch's values: check the expression")
        zero = wr.get("zero", bool, False)
        align = read_align(wr, 256)
        scope = wr.get("scope", str, "instance")
        if scope not in WORKSPACE_SCOPES:
            wr.fail("scope", f"must be one of {list(WORKSPACE_SCOPES)}, not {scope!r}",
                    hint='"kernel" shares one buffer among the instances that declare it (docs/CONTRACTS.md)')
        wr.finish()
        out.append(WorkspaceDecl(wname, size, zero, align, wr.origin(), scope))
    r.finish()
    return tuple(out)


def parse_host(top: Reader, params: dict[str, str], facts: list[FactDecl]) -> HostDecl | None:
    """[host] provider/fills/reads/facts, each name checked against this contract."""
    provided = sorted(n for n, t in params.items() if t in PROVIDED_TYPES)
    r = top.table("host")
    if not r.data:
        if provided:
            top.fail("params", f"parameter(s) {provided} of type tmap need a host provider",
                   hint='add [host] provider = "<file>.py" fills = [...] (docs/CONTRACTS.md)')
        return None
    provider = r.get("provider", str)
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.py", provider):
        r.fail("provider", f"must be a Python file name beside the contract, not {provider!r}",
               hint='e.g. provider = "loader_host.py"')
    lists = {}
    for key in ("fills", "reads", "facts"):
        v = r.get(key, list, [])
        if not all(isinstance(x, str) for x in v) or len(set(v)) != len(v):
            r.fail(key, "must be a list of distinct names")
        lists[key] = tuple(v)
    for n in lists["fills"]:
        if params.get(n) not in PROVIDED_TYPES:
            r.fail("fills", f"{n!r} is not a tmap parameter of this component",
                   hint="a provider fills only its own [params] of type tmap")
    for n in provided:
        if n not in lists["fills"]:
            r.fail("fills", f"tmap parameter {n!r} is not filled by the provider", hint=f"add {n!r} to fills")
    for n in lists["reads"]:
        if n not in params or params[n] in PROVIDED_TYPES:
            r.fail("reads", f"{n!r} is not a caller-lent parameter of this component",
                   hint="a provider reads the component's own [params] that the caller passes")
    declared = {f.name for f in facts}
    for n in lists["facts"]:
        if n not in declared:
            r.fail("facts", f"fact {n!r} is not declared by this component", hint=f"add [fact.{n}]")
    r.finish()
    return HostDecl(provider, lists["fills"], lists["reads"], lists["facts"], r.origin())


# A C function type as the generated call thunk spells it: `ret(type,type)`, nothing else.
# One `*` or `&` per repetition: `(?:[*&]+(?: ?const\b)?)*` split a run of n stars 2^n ways when the
# rest failed to match ("void(int" + "*" * 30 + "!)" ran for an hour).
_CTYPE = r"[A-Za-z_]\w*(?:(?:::| )[A-Za-z_]\w*)*(?:[*&](?: ?const\b)?)*"
_SIGNATURE = re.compile(rf"{_CTYPE}\((?:{_CTYPE}(?:,{_CTYPE})*)?\)", re.ASCII)


def normalize_signature(sig: str) -> str:
    """'void ( float *,unsigned int )' -> 'void(float*,unsigned int)'."""
    s = re.sub(r"\s+", " ", sig.strip())
    s = re.sub(r"\s*([(),*&])\s*", r"\1", s)
    return s
