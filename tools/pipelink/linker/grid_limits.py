"""Run-time expressions fixed by facts, checked when the kernel is: a grid extent is held to
CUDA's grid limits, a workspace size to a byte count (0..2^64, no division by zero).

The kernel file's parser bounds constants and refuses expressions no launch could use; the
facts' values are known only once the kernel's components are composed, so an extent such as
`"tiles_per_row * 1000"` (y) is checked here, with the facts fixed and every other name (integer
parameters, launch arguments) at each of expr.SAMPLE_VALUES: refused (L-GRID) only when no
sample gives an extent in range, as for the parser's own check. A workspace size is checked the
same way (the contract's parser samples its facts too, and cannot know the values the kernel links
with): one that no launch could size used to link and fail every launch with R-WORKSPACE.
"""

from __future__ import annotations

from pipelink.linker.compose import GRID_MAX, Composition
from pipelink.common.diagnostics import Diagnostic, Fact
from pipelink.common.expr import LIMIT, SAMPLE_VALUES, ExprError, evaluate, names_in
from pipelink.linker.kernel_rules import side_of

AXES = "xyz"


def _values(text: str, facts: dict[str, int]) -> list[int | str]:
    """The extent for each sample of the names that are not facts (all of them, when facts only)."""
    names = names_in(text)
    free = sorted(names - set(facts))
    got: list[int | str] = []
    for v in SAMPLE_VALUES if free else (None,):
        env = {**{n: facts[n] for n in names & set(facts)}, **{n: v for n in free}}
        try:
            got.append(evaluate(text, env))
        except ExprError as e:
            got.append(str(e))
    return got


def check_grid_limits(comp: Composition, facts: dict[str, int], diags: list[Diagnostic]) -> None:
    where = str(comp.grid_origin or comp.file)
    for n, g in enumerate(comp.grid):
        if not isinstance(g, str):
            continue
        try:
            used = names_in(g) & set(facts)
        except ExprError:
            continue  # compose rejected it already
        if not used:
            continue  # no fact in it: the parser checked it the same way
        got = _values(g, facts)
        if any(isinstance(v, int) and 1 <= v <= GRID_MAX[n] for v in got):
            continue
        shown = ", ".join(f"{f} = {facts[f]}" for f in sorted(used))
        diags.append(Diagnostic(
            "L-GRID", f"grid {AXES[n]} = {g!r} is {got[0]:,} with {shown}; a grid's {AXES[n]} extent is "
            f"1..{GRID_MAX[n]:,}" if isinstance(got[0], int) else
            f"grid {AXES[n]} = {g!r} cannot be evaluated with {shown}: {got[0]}", "kernel.grid",
            (Fact(f"kernel {comp.name}", f"grid = {[str(x) for x in comp.grid]}", where),),
            "compute the extent so that it fits for the facts the kernel links with (a larger x, a loop in the "
            "kernel, or smaller tiles)"))


def check_workspace_sizes(comp: Composition, facts: dict[str, int], owner: dict, diags: list[Diagnostic]) -> None:
    """Each workspace size that reads facts gives a byte count (0..2^64) for some launch (C-EXPR)."""
    seen: set[str] = set()
    for i in comp.instances:
        for w in i.contract.workspaces:
            key = f"@kernel:{w.name}" if w.scope == "kernel" else f"{i.name}.{w.name}"
            if not isinstance(w.bytes, str) or key in seen:
                continue  # a kernel-scope workspace is one buffer (L-WORKSPACE checks its declarations agree)
            seen.add(key)
            try:
                used = names_in(w.bytes) & set(facts)
            except ExprError:
                continue  # the contract's parser rejected it already
            if not used:
                continue  # no fact in it: the parser checked it the same way
            got = _values(w.bytes, facts)
            if any(isinstance(v, int) and 0 <= v <= LIMIT for v in got):
                continue
            shown = ", ".join(f"{f} = {facts[f]}" for f in sorted(used))
            free = " (and every other name at each of " + ", ".join(map(str, SAMPLE_VALUES)) + ")" \
                if names_in(w.bytes) - used else ""
            what = f"is {got[0]:,}" if isinstance(got[0], int) else f"cannot be evaluated: {got[0]}"
            diags.append(Diagnostic(
                "C-EXPR", f"{side_of(i)}: workspace.{w.name}.bytes = {w.bytes!r} {what}, with {shown}{free}; a "
                "workspace size is a byte count in 0..2^64", f"workspace.{w.name}.bytes",
                (Fact(side_of(i), f"bytes = {w.bytes!r}", str(w.origin)),
                 *(_fact_origin(comp, owner, f, facts[f]) for f in sorted(used))),
                "every launch would be refused (R-WORKSPACE): fix the expression, or link with facts it can size"))


def _fact_origin(comp: Composition, owner: dict, name: str, value: int) -> Fact:
    """The owner's statement of a fact: a component, the kernel file, or the kernel's cluster."""
    inst = owner.get(name)
    if inst is not None:
        fd = inst.contract.fact(name)
        return Fact(side_of(inst), f"fact {name} = {value}", str(fd.value_origin or fd.origin) if fd else comp.file)
    kf = next((f for f in comp.facts if f.name == name), None)
    return Fact(f"kernel {comp.name}", f"fact {name} = {value}",
                str(kf.value_origin or kf.origin) if kf is not None else comp.file)
