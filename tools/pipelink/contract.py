"""Parse pass: contract TOML -> typed `Contract`, every clause remembering its file:line.

The schema is strict: unknown keys and wrong types are rejected (C-SCHEMA) so a typo in a
contract never silently changes a placement.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelink.diagnostics import Fact, reject
from pipelink.expr import ExprError, constant_value, names_in, never_valid

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PARAM_TYPES = {"ptr": 8, "u64": 8, "u32": 4, "i32": 4, "f32": 4, "tmap": 128}  # size in bytes
# Alignment in the parameter block: natural for scalars; a CUtensorMap must be 64-byte aligned.
PARAM_ALIGN = {"ptr": 8, "u64": 8, "u32": 4, "i32": 4, "f32": 4, "tmap": 64}
# Types a host provider fills (the caller never passes them).
PROVIDED_TYPES = {"tmap"}
FACT_TYPES = {"u32"}
DTYPES = {"f32", "f16", "bf16", "u32", "i32", "u8", "e4m3", "e5m2"}
SPACES = {"reg", "smem", "global"}
SCOPES = {"role", "warpgroup", "warp", "cta"}
ARCHES = {"sm_90a", "sm_90", "sm_100a", "sm_120a", "sm_80"}
U32_MAX = 2**32 - 1
# mbarrier.init takes a count in 1 .. 2^20 - 1 (PTX ISA); larger counts crash nvJitLink or hang.
MBARRIER_COUNT_MAX = 2**20 - 1


class LineIndex:
    """Maps a TOML path ("ring.ab.depth") to the line it was written on."""

    _header = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?")
    _key = re.compile(r'^\s*("?[A-Za-z0-9_.-]+"?)\s*=')

    def __init__(self, text: str):
        self.lines: dict[str, int] = {}
        self.occurrences: dict[str, list[int]] = {}  # every line of an array-of-tables header
        table = ""
        for no, line in enumerate(text.splitlines(), 1):
            if m := self._header.match(line):
                table = m.group(1).replace('"', "").replace(" ", "")
                parts = table.split(".")
                for n in range(1, len(parts) + 1):  # [callable.export.f] also places "callable"
                    self.lines.setdefault(".".join(parts[:n]), no)
                self.occurrences.setdefault(table, []).append(no)
            elif m := self._key.match(line):
                key = m.group(1).strip('"')
                self.lines.setdefault(f"{table}.{key}" if table else key, no)

    def line(self, path: str) -> int:
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path.rpartition(".")[0]
        return 0


@dataclass(frozen=True)
class Origin:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass(frozen=True)
class FactDecl:
    name: str
    type: str
    own: int | None  # value when owned, None when read
    accept: tuple[int, ...] | None  # explicit accepted values (reader)
    accept_range: tuple[int, int, int] | None  # (min, max, multiple_of)
    origin: Origin
    value_origin: Origin | None = None  # the `own =` or `accept =` line, which diagnostics cite

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
            return f"accept = {list(self.accept)}"
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
        for b in self.barriers:
            out[f"{p}bar__{b.name}"] = f"barrier.{b.name}"
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


class _Reader:
    """Typed access to one TOML table, raising C-SCHEMA with file:line on misuse."""

    def __init__(self, data: dict, path: str, lines: LineIndex, file: str):
        self.data, self.path, self.lines, self.file = data, path, lines, file
        self.used: set[str] = set()

    def origin(self, key: str = "") -> Origin:
        p = f"{self.path}.{key}" if self.path and key else (key or self.path)
        return Origin(self.file, self.lines.line(p))

    def fail(self, key: str, message: str, hint: str = ""):
        where = f"{self.path}.{key}" if self.path else key
        raise reject(
            "C-SCHEMA",
            f"{where}: {message}",
            clause=where,
            facts=[Fact(f"contract {Path(self.file).name}", message, str(self.origin(key)))],
            hint=hint or "see docs/CONTRACTS.md for the contract format",
        )

    def get(self, key: str, types, default=..., *, what: str = ""):
        self.used.add(key)
        if key not in self.data:
            if default is ...:
                self.fail(key, "is required", hint=f"add `{key} = ...` to [{self.path}]" if self.path else "")
            return default
        v = self.data[key]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in _as_tuple(types)):
            self.fail(key, f"must be {what or _type_name(types)}, not {type(v).__name__} {v!r}")
        return v

    def table(self, key: str) -> "_Reader":
        v = self.get(key, dict, {})
        return _Reader(v, f"{self.path}.{key}" if self.path else key, self.lines, self.file)

    def finish(self):
        extra = sorted(set(self.data) - self.used)
        if extra:
            self.fail(extra[0], "is not a known field", hint="check the spelling against docs/CONTRACTS.md")


def _as_tuple(t):
    return t if isinstance(t, tuple) else (t,)


def _type_name(types) -> str:
    return " or ".join(t.__name__.replace("str", "string").replace("int", "integer") for t in _as_tuple(types))


def load_toml(path: str | Path) -> tuple[dict, LineIndex, str]:
    from pipelink.files import read_text

    text = read_text(path, "input file")
    return parse_toml_text(text, str(path)), LineIndex(text), text


def parse_toml_text(text: str, file: str) -> dict:
    try:
        return tomllib.loads(text)
    except (RecursionError, MemoryError):  # tomllib recurses per nesting level: `a = [[[[...` is too deep
        raise reject("C-SYNTAX", f"{file}: arrays or tables nested too deeply",
                     facts=[Fact(f"file {Path(file).name}", "nesting deeper than the parser allows", str(Origin(file, 1)))],
                     hint="contracts and kernel files need a few levels of nesting at most") from None
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"at line (\d+)", str(e))
        # "at end of document" (an unclosed array or string) has no line: the last line is where it ends.
        line = int(m.group(1)) if m else max(1, len(text.splitlines()))
        raise reject(
            "C-SYNTAX",
            f"{file}:{line}: {e}",
            facts=[Fact(f"file {Path(file).name}", str(e), str(Origin(file, line)))],
            hint="fix the TOML syntax (strings need quotes, tables [name] on their own line)",
        ) from None


def _ident(r: _Reader, key: str, value: str) -> str:
    if not IDENT.match(value):
        r.fail(key, f"{value!r} is not a C identifier")
    return value


def _align(r: _Reader, default: int) -> int:
    align = r.get("align", int, default)
    if align <= 0 or align & (align - 1) or align > 1024:
        r.fail("align", f"must be a power of two up to 1024, not {align}")
    return align


def _u32(r: _Reader, key: str, v: int, lo: int = 0, hi: int = U32_MAX) -> int:
    """Every number a contract states ends up in a u32 (or a narrower hardware field)."""
    if not lo <= v <= hi:
        r.fail(key, f"must be in {lo}..{hi}, not {v}")
    return v


def _expr(r: _Reader, key: str, default=..., *, facts: set[str] | None = None, hi: int = U32_MAX) -> str | int:
    v = r.get(key, (str, int), default, what="an integer or an arithmetic expression")
    if v is None:  # an optional key left out
        return None
    if isinstance(v, str):
        try:
            const = constant_value(v)
        except ExprError:
            const = None  # names_in below reports it with its own wording
        if const is not None and not 1 <= const <= hi:
            # A constant expression is held to the bounds of the integer it stands for.
            raise reject("C-EXPR", f"{r.path}.{key}: {v!r} is {const}; it must be in 1..{hi}", clause=f"{r.path}.{key}",
                         facts=[Fact(f"contract {Path(r.file).name}", f"{key} = {v!r} = {const}", str(r.origin(key)))],
                         hint=f"a constant {key} is held to the same bounds as an integer (docs/CONTRACTS.md, "
                              "Limits on values)")
        try:
            names = names_in(v)
        except ExprError as e:
            raise reject("C-EXPR", f"{r.path}.{key}: {e}", clause=f"{r.path}.{key}",
                         facts=[Fact(f"contract {Path(r.file).name}", f"{key} = {v!r}", str(r.origin(key)))],
                         hint="use integers, fact names, + - * // % ( ) and min/max/ceil_div") from None
        unknown = sorted(names - facts) if facts is not None else []
        if unknown:
            # A name the contract does not declare would be read from whichever component owns
            # it, skipping this component's accept check: a typo or a missing [fact.X].
            raise reject("C-EXPR", f"{r.path}.{key}: {v!r} uses {', '.join(unknown)}, which this contract does not declare",
                         clause=f"{r.path}.{key}",
                         facts=[Fact(f"contract {Path(r.file).name}", f"{key} = {v!r}", str(r.origin(key)))],
                         hint=f"declare [fact.{unknown[0]}] (with accept = ... for the values this component supports), "
                              f"or fix the name; declared facts: {', '.join(sorted(facts)) or 'none'}")
    else:
        _u32(r, key, v, 1, hi)
    return v


def parse_contract(path: str | Path, *, display_name: str | None = None) -> Contract:
    data, lines, text = load_toml(path)
    return contract_from_data(data, lines, display_name or str(path))


def parse_contract_text(text: str, file: str) -> Contract:
    return contract_from_data(parse_toml_text(text, file), LineIndex(text), file)


def contract_from_data(data: dict, lines: LineIndex, file: str) -> Contract:
    top = _Reader(data, "", lines, file)
    comp = top.table("component")
    if not comp.data:
        top.fail("component", "is required", hint="start the contract with [component] name = \"...\"")
    name = _ident(comp, "name", comp.get("name", str))
    kind = comp.get("kind", str, "role")
    if kind not in ("role", "library"):
        comp.fail("kind", f"must be \"role\" or \"library\", not {kind!r}")
    entry = comp.get("entry", str, None)
    if kind == "role" and entry is None:
        comp.fail("entry", "is required for a role component", hint="name the PL_ENTRY(<entry>) function")
    if entry is not None:
        _ident(comp, "entry", entry)
    arch = comp.get("arch", str, "sm_90a")
    co_resident = comp.get("co_resident", bool, False)
    if arch not in ARCHES:
        comp.fail("arch", f"unknown architecture {arch!r}", hint=f"one of {sorted(ARCHES)}")
    comp.finish()

    params_r = top.table("params")
    params, param_origins = [], []
    for k, v in params_r.data.items():
        _ident(params_r, k, k)
        from pipelink.names import reserved_reason

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

    facts = []
    facts_r = top.table("fact")
    for fname in facts_r.data:
        _ident(facts_r, fname, fname)
        if fname in RUNTIME_NAMES:
            facts_r.fail(fname, f"{fname!r} is a value the runtime supplies, not a fact",
                         hint="rename the fact; a fact's value is fixed at link time")
        fr = facts_r.table(fname)
        ftype = fr.get("type", str, "u32")
        if ftype not in FACT_TYPES:
            fr.fail("type", f"unknown fact type {ftype!r}", hint=f"one of {sorted(FACT_TYPES)}")
        own = fr.get("own", int, None)
        if own is not None:
            _u32(fr, "own", own)
        accept = accept_range = None
        acc = fr.get("accept", (list, dict), None)
        if own is not None and acc is not None:
            fr.fail("accept", "an owned fact does not also accept values", hint="remove accept or own")
        if isinstance(acc, list):
            if not acc or not all(isinstance(x, int) and not isinstance(x, bool) for x in acc):
                fr.fail("accept", "must be a non-empty list of integers")
            for x in acc:
                _u32(fr, "accept", x)
            accept = tuple(acc)
        elif isinstance(acc, dict):
            ar = fr.table("accept")
            lo, hi = _u32(ar, "min", ar.get("min", int, 0)), _u32(ar, "max", ar.get("max", int, U32_MAX))
            mult = _u32(ar, "multiple_of", ar.get("multiple_of", int, 1), 1)
            if lo > hi:
                ar.fail("max", f"max = {hi} is below min = {lo}: no value would be accepted")
            ar.finish()
            accept_range = (lo, hi, mult)
        fr.finish()
        value_key = "own" if own is not None else "accept" if acc is not None else ""
        facts.append(FactDecl(fname, ftype, own, accept, accept_range, fr.origin(),
                              fr.origin(value_key) if value_key else None))
    declared_facts = {f.name for f in facts}
    facts_r.finish()

    smem = []
    smem_r = top.table("smem")
    for sname in smem_r.data:
        _ident(smem_r, sname, sname)
        sr = smem_r.table(sname)
        b = _expr(sr, "bytes", facts=declared_facts)
        align = _align(sr, 16)
        phase = sr.get("phase", str, "kernel")
        sr.finish()
        smem.append(SmemClaim(sname, b, align, phase, sr.origin()))
    smem_r.finish()

    barriers = []
    bar_r = top.table("barrier")
    for bname in bar_r.data:
        _ident(bar_r, bname, bname)
        br = bar_r.table(bname)
        threads = br.get("threads", (str, int), "role")
        if isinstance(threads, str) and threads != "role":
            br.fail("threads", f"must be \"role\" or an integer, not {threads!r}")
        if kind == "library" and threads == "role":
            br.fail("threads", "a library component has no role; give a thread count")
        br.finish()
        barriers.append(BarrierClaim(bname, threads, br.origin()))
    bar_r.finish()

    rings = []
    ring_r = top.table("ring")
    for rname in ring_r.data:
        _ident(ring_r, rname, rname)
        rr = ring_r.table(rname)
        side = rr.get("side", str)
        if side not in ("producer", "consumer"):
            rr.fail("side", f"must be \"producer\" or \"consumer\", not {side!r}")
        stage = _expr(rr, "stage_bytes", facts=declared_facts)
        depth = rr.get("depth", (list, int))
        if isinstance(depth, int):
            depth = [depth, depth]
        if (len(depth) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in depth)
                or not 1 <= depth[0] <= depth[1] <= 64):
            rr.fail("depth", f"must be [min, max] with 1 <= min <= max <= 64, not {depth}")
        arrivals = _expr(rr, "arrivals", facts=declared_facts, hi=MBARRIER_COUNT_MAX)
        peer = _expr(rr, "peer_arrivals", None, facts=declared_facts, hi=MBARRIER_COUNT_MAX)
        ralign = _align(rr, 128)
        rr.finish()
        rings.append(RingSide(rname, side, stage, (depth[0], depth[1]), arrivals, peer, ralign, rr.origin()))
    ring_r.finish()

    tensors = []
    for direction in ("export", "import"):
        tr_all = top.table(direction)
        for tname in tr_all.data:
            _ident(tr_all, tname, tname)
            tr = tr_all.table(tname)
            shape = tr.get("shape", list)
            if not shape or not all(isinstance(x, (int, str)) and not isinstance(x, bool) for x in shape):
                tr.fail("shape", "must be a list of integers or expressions")
            for x in shape:
                _shape_entry(tr, x, declared_facts)
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

    host = _host(top, dict(params), facts)
    workspaces = _workspaces(top.table("workspace"), dict(params), facts)

    callables = []
    cr_all = top.table("callable")
    for direction in ("export", "import"):
        cr_dir = cr_all.table(direction)
        for cname in cr_dir.data:
            _ident(cr_dir, cname, cname)
            cr = cr_dir.table(cname)
            sig = cr.get("signature", str)
            if not _SIGNATURE.fullmatch(normalize_signature(sig)) or len(sig) > 1000:
                # The text is pasted into the generated C++ (the call thunk): only `ret(type, ...)`.
                cr.fail("signature", f"{sig[:80]!r} is not a C function type `ret(type, ...)`",
                        hint='e.g. "unsigned(unsigned, const void*, float*)": types are identifiers, `*`, `&` and '
                             "`const`; no names, defaults or other punctuation")
            cr.finish()
            callables.append(CallableDecl(cname, direction, normalize_signature(sig), cr.origin()))
        cr_dir.finish()
    cr_all.finish()
    top.finish()

    return Contract(
        name=name, kind=kind, entry=entry, arch=arch, params=tuple(params), role=role,
        facts=tuple(facts), smem=tuple(smem), barriers=tuple(barriers), rings=tuple(rings),
        tensors=tuple(tensors), callables=tuple(callables), file=file,
        origin=Origin(file, lines.line("component")), param_origins=tuple(param_origins), host=host,
        workspaces=workspaces, co_resident=co_resident,
    )


def _workspaces(r: _Reader, params: dict[str, str], facts: list[FactDecl]) -> tuple[WorkspaceDecl, ...]:
    """[workspace.X] bytes/zero/align; sizes may use integer params, facts and grid_x."""
    known = {f.name for f in facts} | {n for n, t in params.items() if t in ("u32", "i32", "u64")}
    out = []
    for wname in r.data:
        _ident(r, wname, wname)
        wr = r.table(wname)
        size = _expr(wr, "bytes")
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
        align = _align(wr, 256)
        scope = wr.get("scope", str, "instance")
        if scope not in WORKSPACE_SCOPES:
            wr.fail("scope", f"must be one of {list(WORKSPACE_SCOPES)}, not {scope!r}",
                    hint='"kernel" shares one buffer among the instances that declare it (docs/CONTRACTS.md)')
        wr.finish()
        out.append(WorkspaceDecl(wname, size, zero, align, wr.origin(), scope))
    r.finish()
    return tuple(out)


def _host(top: _Reader, params: dict[str, str], facts: list[FactDecl]) -> HostDecl | None:
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


def _shape_entry(r: _Reader, x, facts: set[str]) -> None:
    """One tensor extent: checked like any other expression (a list entry has no key of its own)."""
    sub = _Reader({"shape": x}, r.path, r.lines, r.file)
    _expr(sub, "shape", facts=facts)


_CTYPE = r"[A-Za-z_]\w*(?:(?:::| )[A-Za-z_]\w*)*(?:[*&]+(?: ?const\b)?)*"
_SIGNATURE = re.compile(rf"{_CTYPE}\((?:{_CTYPE}(?:,{_CTYPE})*)?\)", re.ASCII)


def normalize_signature(sig: str) -> str:
    """'void ( float *,unsigned int )' -> 'void(float*,unsigned int)'."""
    s = re.sub(r"\s+", " ", sig.strip())
    s = re.sub(r"\s*([(),*&])\s*", r"\1", s)
    return s
