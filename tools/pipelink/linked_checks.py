"""Checks of the linked machine code against the placement (contracts checked against the code).

The handles make a component's placement an immediate, but nothing stops a component from
using a barrier id or a register budget of its own. After the link we read the cubin back:
- every named barrier id in the SASS must be 0 (__syncthreads) or an id the solver placed
  (L-SASS); an id held in a register cannot be checked statically and is a warning;
- no local memory (spills or stack): an error (L-REGS), or a warning with `link --spills=warning`.
  Its facts name the roles whose trial compile (the role alone, no register cap) used more
  registers than the solver gave them: the likely spillers. Without local memory that count is
  no finding (ptxas takes what it is offered), so it is only recorded in the report.
"""

from __future__ import annotations

import re

from pipelink.diagnostics import Diagnostic, Fact, reject

_BAR = re.compile(r"^BAR\.(?:SYNC|ARV|RED\.\w+)(?:\.DEFER_BLOCKING)?\s+([^,\s]+)")


def barrier_ids(sass: list[str]) -> tuple[set[int], list[str]]:
    """(immediate barrier ids used, instructions whose id is in a register)."""
    ids, dynamic = set(), []
    for insn in sass:
        m = _BAR.match(insn.split(" ", 1)[-1] if insn.startswith("@") else insn)
        if not m:
            continue
        op = m.group(1)
        if re.fullmatch(r"0x[0-9a-fA-F]+|\d+", op):
            ids.add(int(op, 0))
        else:
            dynamic.append(insn)
    return ids, dynamic


def check_linked(ch, pl, cubin: bytes, usage: dict, tk, *, spills: str = "error") -> list[Diagnostic]:
    from pipelink.sass import disassemble

    name = ch.comp.name
    warnings: list[Diagnostic] = []
    role_facts = [Fact(r.inst.name, f"budget {pl.budgets[r.inst.name]} registers (regs = {list(r.regs)})",
                       str(r.inst.contract.role.origin)) for r in ch.roles]
    over = [Fact(r.inst.name, f"its trial compile used {r.measured_regs} registers, over its budget "
                              f"{pl.budgets[r.inst.name]}", str(r.inst.contract.role.origin))
            for r in ch.roles if r.measured_regs > pl.budgets[r.inst.name]]
    local, stack = usage.get("LOCAL", 0), usage.get("STACK", 0)
    if local > 0 or stack > 0:
        diag = Diagnostic("L-REGS", f"kernel {name} spills: {local} B local memory, {stack} B stack", "role",
                          (Fact("linked cubin", " ".join(f"{k}:{v}" for k, v in usage.items())), *role_facts, *over),
                          "raise the spilling role's register range, or give it fewer warps "
                          "(link --spills=warning accepts it)")
        if spills != "warning":
            raise reject(diag.code, diag.message, clause=diag.clause, facts=diag.facts, hint=diag.hint)
        warnings.append(Diagnostic(diag.code, diag.message, diag.clause, diag.facts, diag.hint, "warning"))
    sass = disassemble(cubin, str(tk.home)).get(name, [])
    used, dynamic = barrier_ids(sass)
    placed = {0} | set(pl.barrier_ids.values())
    stray = sorted(used - placed)
    if stray:
        raise reject("L-SASS", f"kernel {name} uses named barrier id(s) {stray}, which no contract clause was placed on",
                     clause="barrier",
                     facts=[Fact("linked SASS", f"barrier ids used: {sorted(used)}")] +
                           [Fact(k, f"placed on id {v}") for k, v in sorted(pl.barrier_ids.items(), key=lambda kv: kv[1])],
                     hint="a component must take its barrier ids from PL_BARRIER(name) ([barrier.name] in its "
                          "contract), never a literal: another component may own that id")
    if dynamic:
        warnings.append(Diagnostic("L-SASS", f"kernel {name} uses {len(dynamic)} named barrier(s) whose id is computed "
                                   "at run time; they cannot be checked against the placement", "barrier",
                                   (Fact("linked SASS", dynamic[0]),),
                                   "pass PL_BARRIER(name) directly; link --guard checks ids at run time", "warning"))
    return warnings
