"""A grid extent fixed by facts is held to CUDA's grid limits when the kernel is checked.

The kernel file's parser bounds constants and refuses expressions no launch could use; the
facts' values are known only once the kernel's components are composed, so an extent such as
`"tiles_per_row * 1000"` (y) is checked here, with the facts fixed and every other name (integer
parameters, launch arguments) at each of expr.SAMPLE_VALUES: refused (L-GRID) only when no
sample gives an extent in range, as for the parser's own check.
"""

from __future__ import annotations

from pipelink.linker.compose import GRID_MAX, Composition
from pipelink.common.diagnostics import Diagnostic, Fact
from pipelink.common.expr import SAMPLE_VALUES, ExprError, evaluate, names_in

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
