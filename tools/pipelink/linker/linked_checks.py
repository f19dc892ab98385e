"""Checks of the linked machine code against the placement (contracts checked against the code).

The handles make a component's placement an immediate, but nothing stops a component from
using a barrier id or a register budget of its own. After the link we read the cubin back:
- every named barrier id in the SASS must be 0 (__syncthreads) or an id the solver placed
  (L-SASS); an id held in a register cannot be checked statically and is a warning;
- no local memory (spills or stack): an error (L-REGS), or a warning with `link --spills=warning`.
  Its facts name the roles whose trial compile (the role alone, no register cap) used more
  registers than the solver gave them: the likely spillers. Without local memory that count is
  no finding (ptxas takes what it is offered), so it is only recorded in the report;
- every register budget the dispatcher sets with setmaxnreg is in the SASS (USETMAXREG): ptxas
  drops them all, with only an info line (C7507), when a role's code needs more than its budget,
  and the map would describe budgets the kernel does not have (L-REGS);
- every named barrier with an immediate id and thread count counts the threads its contract
  clause says (`threads`, "role" = the role's warps): a count the source hard-codes for another
  role size would hang or release early (L-BARRIER-THREADS).
"""

from __future__ import annotations

import re

from pipelink.common.diagnostics import Diagnostic, Fact, reject
from pipelink.linker import sass as sass_dump  # a module: tests replace sass_dump.disassemble

_BAR = re.compile(r"^BAR\.(?:SYNC|ARV|RED\.\w+)(?:\.DEFER_BLOCKING)?\s+([^,\s]+)")
_BAR_COUNT = re.compile(r"^BAR\.(?:SYNC|ARV)(?:\.DEFER_BLOCKING)?\s+(0x[0-9a-fA-F]+|\d+)(?:,\s*(\S+))?$")
_MAXREG = re.compile(r"^USETMAXREG\.\S+\s+(?:[\w!]+,\s*)?(0x[0-9a-fA-F]+|\d+)$")
_IMM = re.compile(r"0x[0-9a-fA-F]+|\d+")


def _unpredicated(insn: str) -> str:
    return insn.split(" ", 1)[-1] if insn.startswith("@") else insn


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
    sass = sass_dump.disassemble(cubin, str(tk.home)).get(name, [])
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
    _check_setmaxnreg(ch, pl, sass, usage)
    _check_barrier_threads(ch, pl, sass)
    if dynamic:
        warnings.append(Diagnostic("L-SASS", f"kernel {name} uses {len(dynamic)} named barrier(s) whose id is computed "
                                   "at run time; they cannot be checked against the placement", "barrier",
                                   (Fact("linked SASS", dynamic[0]),),
                                   "pass PL_BARRIER(name) directly; link --guard checks ids at run time", "warning"))
    return warnings


def _check_setmaxnreg(ch, pl, sass: list[str], usage: dict) -> None:
    """The budgets the dispatcher asked for must be the kernel's (ptxas may ignore setmaxnreg)."""
    if not pl.uses_setmaxnreg:
        return
    want = {b for b in pl.group_budgets if b != pl.entry_regs}
    got = {int(m.group(1), 0) for insn in sass if (m := _MAXREG.match(_unpredicated(insn)))}
    missing = sorted(want - got)
    if not missing:
        return
    needy = sorted((r for r in ch.roles if r.measured_regs > pl.budgets[r.inst.name]),
                   key=lambda r: pl.budgets[r.inst.name] - r.measured_regs)  # the largest shortfall first
    facts = [Fact("linked SASS", f"setmaxnreg budgets found: {sorted(got) or 'none'}; asked: {sorted(want)} "
                                 f"(every warp keeps the launch's {usage.get('REG', '?')} registers)")]
    facts += [Fact(r.inst.name, f"budget {pl.budgets[r.inst.name]} registers (regs = {list(r.regs)}); its trial "
                                f"compile used {r.measured_regs}", str(r.inst.contract.role.origin)) for r in ch.roles]
    hint = "raise the regs minimum of the role whose code needs more than its budget" + (
        ": most likely " + ", then ".join(f"{r.inst.name} (budget {pl.budgets[r.inst.name]}, trial compile "
                                          f"{r.measured_regs})" for r in needy) if needy else "")
    raise reject("L-REGS", f"kernel {ch.comp.name}: ptxas ignored the register budgets {missing} (setmaxnreg): "
                           "a role's code needs more registers than the solver gave it", clause="role",
                 facts=facts, hint=hint + "; ptxas never lowers a warp below what its code needs")


def _check_barrier_threads(ch, pl, sass: list[str]) -> None:
    """Named barriers with immediate id and count: the count is the clause's `threads`."""
    by_id = {pl.barrier_ids[b.key]: b for b in ch.barriers if b.key in pl.barrier_ids}
    seen: dict[tuple[int, int], str] = {}
    for insn in sass:
        m = _BAR_COUNT.match(_unpredicated(insn))
        if not m or int(m.group(1), 0) not in by_id:
            continue
        if m.group(2) is None:
            count = pl.threads  # bar.sync id: every thread of the block
        elif _IMM.fullmatch(m.group(2)):
            count = int(m.group(2), 0)
        else:
            continue  # a count in a register: not checkable here
        b = by_id[int(m.group(1), 0)]
        if count != b.threads:
            seen.setdefault((int(m.group(1), 0), count), insn)
    if not seen:
        return
    facts = []
    for (bid, count), insn in sorted(seen.items()):
        b = by_id[bid]
        facts += [Fact("linked SASS", f"{insn} (barrier id {bid}: {b.key}) counts {count} threads"),
                  Fact(b.origin.rsplit(" at ", 1)[0], f"[barrier.{b.key.split('.', 1)[1]}] counts {b.threads} threads",
                       b.origin.rsplit(" at ", 1)[-1])]
    keys = sorted({by_id[bid].key for bid, _ in seen})
    raise reject("L-BARRIER-THREADS", f"named barrier(s) {', '.join(keys)} count other threads in the code than in "
                                      "their contract", clause="barrier", facts=facts,
                 hint="make the contract's threads what the code's bar.sync/bar.arrive counts (threads = \"role\" is "
                      "the role's warps x 32), or count PL_WARPS() * 32 in the code")
