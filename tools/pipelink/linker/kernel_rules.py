"""Kernel-file rules the contracts cannot see: [[bind]] clauses and grid names.

A bind or grid name that refers to nothing used to be ignored (a typo linked and failed only
at launch, or silently bound the default export). Each is a coded diagnostic citing the
kernel file's line: L-BIND for binds, L-GRID for grid names.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from pipelink.common.diagnostics import Diagnostic, Fact
from pipelink.common.expr import ExprError, evaluate, names_in
from pipelink.common.manifest_schema import BUILTIN_GRID_NAMES
from pipelink.linker.compose import Bind, Composition, Instance

GRID_PARAM_TYPES = ("u32", "i32", "u64")  # host scalars a grid extent may be computed from


@dataclass
class BindPlan:
    """The explicit binds that are valid, and what the invalid ones named (to avoid cascades)."""

    explicit: dict[str, Bind] = field(default_factory=dict)  # "inst.import" -> bind
    bad_imports: set[str] = field(default_factory=set)
    bad_exports: set[str] = field(default_factory=set)


def _ends(inst: Instance, direction: str) -> dict[str, str]:
    """name -> kind ("tensor" | "callable") of the instance's imports or exports."""
    c = inst.contract
    out = {t.name: "tensor" for t in c.tensors if t.direction == direction}
    for cd in c.callables:
        if cd.direction == direction:
            out.setdefault(cd.name, "callable")
    return out


def _resolve(comp: Composition, ref: str, direction: str):
    """(instance, kind, problem) for "inst.name"; problem is None when it names a real end."""
    inst_name, dot, name = ref.partition(".")
    if not dot or not inst_name or not name:
        return None, None, f"{ref!r} is not \"instance.name\""
    inst = comp.instance(inst_name)
    if inst is None:
        names = [i.name for i in comp.instances]
        near = difflib.get_close_matches(inst_name, names, 1)
        return None, None, f"no instance {inst_name!r}" + (f" (did you mean {near[0]!r}?)" if near else "")
    ends = _ends(inst, direction)
    if name not in ends:
        have = ", ".join(sorted(ends)) or "none"
        return inst, None, f"instance {inst_name} ({inst.package.name}) has no {direction} {name!r} (its {direction}s: {have})"
    return inst, ends[name], None


def _default_exports(comp: Composition, importer: str) -> set[str]:
    """Exports the import would bind to without its (broken) bind: not also reported unbound."""
    name = importer.partition(".")[2]
    return {f"{i.name}.{name}" for i in comp.instances if name in _ends(i, "export")}


def check_binds(comp: Composition, diags: list[Diagnostic]) -> BindPlan:
    plan = BindPlan()
    first: dict[str, Bind] = {}
    kernel = f"kernel {comp.name}"
    for b in comp.binds:
        text = f"import = {b.importer!r}, export = {b.exporter!r}"
        ii, ikind, iproblem = _resolve(comp, b.importer, "import")
        ei, ekind, eproblem = _resolve(comp, b.exporter, "export")
        problem = None
        if iproblem or eproblem:
            problem = "; ".join(p for p in (iproblem, eproblem) if p)
        elif ii.name == ei.name:
            problem = f"binds instance {ii.name} to itself"
        elif ikind != ekind:
            problem = f"binds a {ikind} import to a {ekind} export"
        if b.importer in first:
            prev = first[b.importer]
            diags.append(Diagnostic(
                "L-BIND", f"import {b.importer} is bound twice", "bind",
                (Fact(kernel, f"import = {prev.importer!r}, export = {prev.exporter!r}", str(prev.origin)),
                 Fact(kernel, text, str(b.origin))),
                "keep one [[bind]] per import"))
            plan.bad_imports.add(b.importer)
            plan.bad_exports.update({prev.exporter, b.exporter})
            plan.explicit.pop(b.importer, None)
            continue
        first[b.importer] = b
        if problem:
            diags.append(Diagnostic(
                "L-BIND", f"[[bind]] {b.importer} <- {b.exporter}: {problem}", "bind",
                (Fact(kernel, text, str(b.origin)),),
                "a bind names an existing import and an export of another instance, as \"instance.name\" "
                "(fix the names, or remove the bind to use the default: the one export of the same name)"))
            plan.bad_imports.add(b.importer)
            plan.bad_exports.add(b.exporter)
            plan.bad_exports.update(_default_exports(comp, b.importer))
            continue
        plan.explicit[b.importer] = b
    return plan


# Names the runtime supplies from the device.
GRID_BUILTINS = BUILTIN_GRID_NAMES


def check_grid(comp: Composition, params: dict[str, str], facts: dict[str, int], diags: list[Diagnostic]) -> None:
    kernel = f"kernel {comp.name}"
    where = str(comp.grid_origin or comp.file)
    for a in comp.launch_args:
        if a in GRID_BUILTINS:
            diags.append(Diagnostic(
                "L-GRID", f"launch argument {a!r} is a device value the runtime supplies", "kernel.launch_args",
                (Fact(kernel, f"launch_args = {list(comp.launch_args)}", where),),
                f"remove {a!r} from launch_args"))
        elif a in params or a in facts:
            diags.append(Diagnostic(
                "L-GRID", f"launch argument {a!r} is also a {'parameter' if a in params else 'fact'}", "kernel.launch_args",
                (Fact(kernel, f"launch_args = {list(comp.launch_args)}", where),),
                f"remove {a!r} from launch_args: the grid reads the {'parameter' if a in params else 'fact'} itself"))
    known = sorted(set(params) | set(facts) | set(comp.launch_args) | set(GRID_BUILTINS))
    for g in comp.grid:
        if not isinstance(g, str):
            continue
        try:
            names = names_in(g)
        except ExprError:
            continue  # compose rejected it already
        for n in sorted(names):
            if n in params and params[n] not in GRID_PARAM_TYPES:
                diags.append(Diagnostic(
                    "L-GRID", f"grid expression {g!r} reads {n}, a {params[n]} parameter", "kernel.grid",
                    (Fact(kernel, f"grid = {[str(x) for x in comp.grid]}", where),),
                    f"a grid extent is computed from integer parameters ({', '.join(GRID_PARAM_TYPES)}), facts "
                    "and launch_args"))
            elif n not in params and n not in facts and n not in comp.launch_args and n not in GRID_BUILTINS:
                near = difflib.get_close_matches(n, known, 1)
                diags.append(Diagnostic(
                    "L-GRID", f"grid expression {g!r} names {n!r}, which is no parameter, fact or launch argument",
                    "kernel.grid", (Fact(kernel, f"grid = {[str(x) for x in comp.grid]}", where),),
                    (f"did you mean {near[0]!r}? " if near else "") +
                    f"a name only the caller knows at launch must be listed: [kernel] launch_args = [\"{n}\"]"))


def check_param_fact_names(comp: Composition, params: dict[str, str], facts: dict[str, int], owner,
                           diags: list[Diagnostic]) -> None:
    """A name is one value in the expressions that read it (grids, workspace sizes): one that is
    both a host parameter and a fact would be read as the parameter by some and the fact by others."""
    for name in sorted(set(params) & set(facts)):
        pi = next(i for i in comp.instances if name in dict(i.contract.params))
        fi = owner.get(name)
        fd = fi.contract.fact(name) if fi is not None else None
        diags.append(Diagnostic(
            "L-PARAMS", f"{name!r} is both a parameter of {side_of(pi)} and a fact"
            + (f" owned by {side_of(fi)}" if fi is not None else " of the kernel"), f"params.{name}",
            (Fact(side_of(pi), f"{name} = {params[name]!r}", str(pi.contract.param_origin(name))),
             Fact(side_of(fi) if fi is not None else f"kernel {comp.name}", f"fact {name} = {facts[name]}",
                  str(fd.origin) if fd is not None else comp.file)),
            "rename the parameter or the fact: grid and workspace expressions read both kinds of name"))


def side_of(inst: Instance) -> str:
    """How a diagnostic names an instance: `name (package)` (check.py uses it too)."""
    return f"{inst.name} ({inst.package.name})"


def check_resident(comp: Composition, diags: list[Diagnostic]) -> None:
    """A co_resident component waits for other CTAs of the grid: a grid that is not bounded by
    resident_ctas could launch more CTAs than fit, and the waiting ones would wait forever for
    CTAs that cannot start (the runtime checks the evaluated grid too: R-GRID)."""
    waiting = [i for i in comp.instances if i.contract.co_resident]
    if not waiting:
        return
    texts = [g for g in comp.grid if isinstance(g, str)]
    try:
        bounded = any("resident_ctas" in names_in(g) for g in texts)
    except ExprError:
        return  # compose rejected the expression already
    where = str(comp.grid_origin or comp.file)
    if bounded:
        over = _exceeds_resident(comp.grid)
        if over:
            diags.append(Diagnostic(
                "L-RESIDENT", f"kernel {comp.name}: {', '.join(i.name for i in waiting)} wait(s) for other CTAs, but the "
                f"grid can exceed resident_ctas: {over}", "kernel.grid",
                (Fact(f"kernel {comp.name}", f"grid = {[str(x) for x in comp.grid]}", where),
                 *(Fact(f"{i.name} ({i.contract.name})", "co_resident = true", str(i.contract.origin)) for i in waiting)),
                'the whole grid (x * y * z CTAs) must be at most resident_ctas, e.g. grid = ["min(resident_ctas, tiles)", '
                '1, 1]'))
        return
    diags.append(Diagnostic(
        "L-RESIDENT", f"kernel {comp.name}: {', '.join(i.name for i in waiting)} wait(s) for other CTAs, but the grid "
        "is not bounded by resident_ctas", "kernel.grid",
        (Fact(f"kernel {comp.name}", f"grid = {[str(x) for x in comp.grid]}", where),
         *(Fact(f"{i.name} ({i.contract.name})", "co_resident = true", str(i.contract.origin)) for i in waiting)),
        'bound the grid by the CTAs that fit at once, e.g. grid = ["min(resident_ctas, tiles)", 1, 1]'))


def _exceeds_resident(grid) -> str:
    """A counterexample (text) where the grid's CTAs exceed resident_ctas, or "". Naming
    resident_ctas is not a bound (`resident_ctas * 2`, a y extent of `bh`): the grid is evaluated
    at sample values (num_sms = resident_ctas, every other name alike) and any sample over the
    bound refutes it. A sample the expressions cannot evaluate (a division by zero) is skipped."""
    for r in (1, 2, 7, 132, 264):
        for v in (1, 2, 3, 1000, 2**20):
            total = 1
            try:
                for g in grid:
                    env = {n: v for n in (names_in(g) if isinstance(g, str) else ())}
                    env.update(resident_ctas=r, num_sms=r)
                    total *= evaluate(g, env)
            except ExprError:
                continue
            if total > r:
                return (f"with resident_ctas = {r} (and every other name = {v}) it launches {total} CTAs")
    return ""
