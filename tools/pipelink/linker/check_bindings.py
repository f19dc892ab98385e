"""Check pass, bindings: each tensor import to one export (a direct or staged transfer), each
callable import to one export, and a library's warp range to the one role that calls it.

Called by check.check; every conflict is added to the shared `Diags`, and an importer left
unbound is remembered there so later checks do not report it a second time (no cascade).
"""

from __future__ import annotations

from pipelink.common.diagnostics import Fact
from pipelink.linker.check_types import CallBinding, Transfer, Diags
from pipelink.linker.compose import Composition, Instance
from pipelink.linker.contract import TensorDecl
from pipelink.linker.kernel_rules import BindPlan
from pipelink.linker.kernel_rules import side_of as _side

# Register layouts the linker can stage through shared memory (generate._flat indexes them).
STAGEABLE_LAYOUTS = {"blocked", "cyclic"}


def _scope_threads(inst: Instance, t: TensorDecl) -> int:
    if t.scope == "warp":
        return 32
    if t.scope == "warpgroup":
        return 128
    role = inst.contract.role
    return 32 * role.warps if role else 0


def check_tensors(comp: Composition, d: Diags, ev, binds: BindPlan) -> list[Transfer]:
    exports = [(i, t) for i in comp.instances for t in i.contract.tensors if t.direction == "export"]
    imports = [(i, t) for i in comp.instances for t in i.contract.tensors if t.direction == "import"]
    out = []
    used_exports: dict[str, tuple] = {}
    for ii, it in imports:
        if f"{ii.name}.{it.name}" in binds.bad_imports:  # its [[bind]] is wrong (L-BIND): no second diagnostic
            d.unbound_importers.add(ii.name)
            continue
        bound = _bound_export(d, ii, it, exports, binds, used_exports)
        transfer = _transfer(d, ev, *bound, ii, it) if bound else None
        if transfer is None:  # its importer's caller is unknown, not missing: no L-ROLE cascade
            d.unbound_importers.add(ii.name)
            continue
        out.append(transfer)
    for ei, et in exports:
        if f"{ei.name}.{et.name}" not in used_exports and f"{ei.name}.{et.name}" not in binds.bad_exports:
            d.add("L-TENSOR-UNBOUND", f"{_side(ei)} exports tensor {et.name!r} but nothing imports it",
                  clause=f"export.{et.name}", facts=[Fact(_side(ei), f"[export.{et.name}]", str(et.origin))],
                  hint="add the importing component; the exporter calls PL_EXPORT, so it needs a receiver")
    return out


def _bound_export(d: Diags, ii: Instance, it: TensorDecl, exports: list, binds: BindPlan,
                  used_exports: dict[str, tuple]) -> tuple[Instance, TensorDecl] | None:
    """The one export an import binds to (by [[bind]], else by name), marked used; else None, reported."""
    key = f"{ii.name}.{it.name}"
    if key in binds.explicit:
        ek = binds.explicit[key].exporter
        cands = [(ei, et) for ei, et in exports if f"{ei.name}.{et.name}" == ek]
    else:
        cands = [(ei, et) for ei, et in exports if et.name == it.name]
    if len(cands) != 1:
        d.add("L-TENSOR-UNBOUND",
              f"{_side(ii)} imports tensor {it.name!r}: " +
              ("no component exports it" if not cands else f"{len(cands)} exports match"),
              clause=f"import.{it.name}",
              facts=[Fact(_side(ii), f"[import.{it.name}]", str(it.origin))] +
                    [Fact(_side(ei), f"[export.{et.name}]", str(et.origin)) for ei, et in cands],
              hint="add the exporting component, or pick one with [[bind]] import = \"inst.name\" export = \"inst.name\"")
        return None
    ei, et = cands[0]
    ekey = f"{ei.name}.{et.name}"
    if ekey in used_exports:
        pi, pt = used_exports[ekey]
        d.add("L-TENSOR-UNBOUND", f"export {ekey} is bound to two imports",
              clause=f"export.{et.name}",
              facts=[Fact(_side(pi), f"[import.{pt.name}]", str(pt.origin)),
                     Fact(_side(ii), f"[import.{it.name}]", str(it.origin))],
              hint="an exported register tile is handed to exactly one importer")
        return None
    used_exports[ekey] = (ii, it)
    return ei, et


def _transfer(d: Diags, ev, ei: Instance, et: TensorDecl, ii: Instance, it: TensorDecl) -> Transfer | None:
    """How a bound export reaches its import; None where the two sides do not fit (each misfit reported)."""
    both = _facts_of_both(ei, et, ii, it)
    es = [ev(x, ei, f"export.{et.name}.shape", et.origin) for x in et.shape]
    is_ = [ev(x, ii, f"import.{it.name}.shape", it.origin) for x in it.shape]
    if None in es or None in is_:
        return None  # C-EXPR said why
    if not _sides_agree(d, et, it, es, is_, both):
        return None
    kind = "direct"
    if et.layout != it.layout:
        if not (et.layout in STAGEABLE_LAYOUTS and it.layout in STAGEABLE_LAYOUTS):
            d.add("L-TENSOR-LAYOUT", f"tensor {it.name!r}: layout {et.layout!r} cannot be converted to {it.layout!r}",
                  clause=f"import.{it.name}.layout", facts=both("layout", et.layout, it.layout),
                  hint=f"the linker stages between {sorted(STAGEABLE_LAYOUTS)}; otherwise use the same layout on both sides")
            return None
        kind = "staged"
    threads = _scope_threads(ei, et)
    if kind == "staged" and not _can_stage(d, ei, et, ii, it, es, is_, threads, both):
        return None
    return Transfer(ei, et, ii, it, kind, tuple(es), threads)


def _facts_of_both(ei: Instance, et: TensorDecl, ii: Instance, it: TensorDecl):
    """what -> (exporter's value, importer's value) -> one fact per side."""
    return lambda what, a, b: [Fact(_side(ei), f"{what} = {a}", str(et.origin)),
                               Fact(_side(ii), f"{what} = {b}", str(it.origin))]


def _sides_agree(d: Diags, et: TensorDecl, it: TensorDecl, es: list, is_: list, both) -> bool:
    """Shape, dtype and space/scope of both sides agree (every disagreement is reported)."""
    ok = True
    if es != is_:
        d.add("L-TENSOR-SHAPE", f"tensor {it.name!r}: export shape {es} but import shape {is_}",
              clause=f"import.{it.name}.shape", facts=both("shape", f"{list(et.shape)} = {es}", f"{list(it.shape)} = {is_}"),
              hint="both sides must use the same tile shape (read the same tile facts)")
        ok = False
    if et.dtype != it.dtype:
        d.add("L-TENSOR-DTYPE", f"tensor {it.name!r}: exported as {et.dtype}, imported as {it.dtype}",
              clause=f"import.{it.name}.dtype", facts=both("dtype", et.dtype, it.dtype),
              hint="convert in the exporter or import the exporter's dtype")
        ok = False
    if et.space != it.space or et.scope != it.scope or et.space != "reg":
        d.add("L-TENSOR-SPACE",
              f"tensor {it.name!r}: export is {et.space}/{et.scope}, import is {it.space}/{it.scope}",
              clause=f"import.{it.name}.space",
              facts=both("space/scope", f"{et.space}/{et.scope}", f"{it.space}/{it.scope}"),
              hint="generated transfers move register tiles between the same threads of one block")
        ok = False
    return ok


def _can_stage(d: Diags, ei: Instance, et: TensorDecl, ii: Instance, it: TensorDecl, es: list, is_: list,
               threads: int, both) -> bool:
    if ei.contract.role is None:
        # A staged transfer indexes its buffer by the exporter's own warps; a library has none.
        d.add("L-TENSOR-LAYOUT", f"tensor {it.name!r}: library {_side(ei)} exports layout {et.layout!r} but "
              f"{_side(ii)} imports {it.layout!r}; only a role's exports can be staged",
              clause=f"import.{it.name}.layout", facts=both("layout", et.layout, it.layout),
              hint="use the same layout on both sides, or export from a role component")
        return False
    n = 1
    for x in es:
        n *= x
    if threads == 0 or n % threads:
        d.add("L-TENSOR-LAYOUT", f"tensor {it.name!r}: {n} elements do not divide among {threads} threads",
              clause=f"export.{et.name}.shape", facts=both("shape", es, is_),
              hint="a staged transfer gives every thread of the scope the same number of elements: "
                   "make the tile a multiple of the thread count, or use the same layout on both sides")
        return False
    return True


def library_callers(lib: str, transfers: list[Transfer], calls: list[CallBinding]) -> dict[str, Instance]:
    """The instances that run library `lib`'s code: the exporters bound to its tensor imports and
    the importers of its callables."""
    out = {t.exporter.name: t.exporter for t in transfers if t.importer.name == lib}
    out.update({c.importer.name: c.importer for c in calls if c.exporter.name == lib})
    return out


def check_library_warps(comp: Composition, transfers: list[Transfer], calls: list[CallBinding], d: Diags) -> None:
    """A library that reads its warp range runs in the warps of the one role that calls it
    (through a tensor import or its callables)."""
    for i in comp.instances:
        if i.contract.role:
            continue
        if not any(h.endswith(("__role__warp_begin", "__role__warps")) for h in i.package.measured.handles):
            continue
        callers = library_callers(i.name, transfers, calls)
        roles = [c for c in callers.values() if c.contract.role]
        if len(callers) != 1 or len(roles) != 1:
            if len(callers) == 0 and i.name in d.unbound_importers:  # no cascade
                continue
            d.add("L-ROLE", f"library {_side(i)} reads its warp range but is called by {len(roles)} roles"
                  + (f" and {len(callers) - len(roles)} libraries" if len(callers) > len(roles) else ""),
                  clause="role", facts=[Fact(_side(i), "uses PL_WARP_BEGIN()/PL_WARPS()", i.contract.file)] +
                  [Fact("caller", c) for c in sorted(callers)],
                  hint="a library's warp range is its caller's: exactly one role may call it (bind its "
                       "imports, or import its callables, from one role)")


def check_library_barriers(transfers: list[Transfer], calls: list[CallBinding], d: Diags) -> None:
    """A library's named barrier runs in the warps of the roles that call it: a count above a
    caller's threads could never complete. (A library cannot say threads = "role", so its
    number stays behind when the calling role is resized.)"""
    callers: dict[str, tuple[Instance, dict[str, Instance]]] = {}
    for lib, role in [(t.importer, t.exporter) for t in transfers] + [(c.exporter, c.importer) for c in calls]:
        if lib.contract.role or not role.contract.role or not lib.contract.barriers:
            continue
        callers.setdefault(lib.name, (lib, {}))[1][role.name] = role
    for lib, roles in callers.values():
        for b in lib.contract.barriers:
            for r in roles.values():
                have = 32 * r.contract.role.warps
                if b.threads != "role" and int(b.threads) > have:
                    d.add("L-BARRIER-THREADS", f"{_side(lib)}: barrier {b.name} counts {b.threads} threads, but it "
                          f"runs in the {have} threads of {_side(r)}", clause=f"barrier.{b.name}",
                          facts=[Fact(_side(lib), f"threads = {b.threads!r}", str(b.origin)),
                                 Fact(_side(r), f"role.warps = {r.contract.role.warps}", str(r.contract.role.origin))],
                          hint="the library's barrier counts its caller's threads: make the two agree")


def check_callables(comp: Composition, d: Diags, binds: BindPlan) -> list[CallBinding]:
    exports = [(i, c) for i in comp.instances for c in i.contract.callables if c.direction == "export"]
    out = []
    explicit = binds.explicit
    for ii, ic in ((i, c) for i in comp.instances for c in i.contract.callables if c.direction == "import"):
        key = f"{ii.name}.{ic.name}"
        if key in binds.bad_imports:
            continue
        if key in explicit:
            cands = [(ei, ec) for ei, ec in exports if f"{ei.name}.{ec.name}" == explicit[key].exporter]
        else:
            cands = [(ei, ec) for ei, ec in exports if ec.name == ic.name]
        if len(cands) != 1:
            d.add("L-CALL-UNBOUND", f"{_side(ii)} calls {ic.name!r}: " +
                  ("no component exports it" if not cands else f"{len(cands)} exports match"),
                  clause=f"callable.import.{ic.name}",
                  facts=[Fact(_side(ii), f"signature = {ic.signature!r}", str(ic.origin))] +
                        [Fact(_side(ei), f"signature = {ec.signature!r}", str(ec.origin)) for ei, ec in cands],
                  hint="add the exporting component, or choose one with [[bind]]")
            continue
        ei, ec = cands[0]
        if ec.signature != ic.signature:
            d.add("L-CALL-SIGNATURE", f"callable {ic.name!r}: {_side(ii)} calls {ic.signature}, {_side(ei)} defines {ec.signature}",
                  clause=f"callable.import.{ic.name}.signature",
                  facts=[Fact(_side(ii), f"signature = {ic.signature!r}", str(ic.origin)),
                         Fact(_side(ei), f"signature = {ec.signature!r}", str(ec.origin))],
                  hint="signatures must match exactly (after whitespace normalisation)")
            continue
        out.append(CallBinding(ii, ic, ei, ec))
    return out
