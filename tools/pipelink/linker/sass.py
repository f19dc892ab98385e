"""Normalized SASS of a cubin, and the linked-vs-control comparison.

Normalization drops what legitimately differs between two builds of the same code
(addresses, encodings, comments, the order of unrelated sections) and keeps the
instructions and their operands, so "identical" means the same machine code.
"""

from __future__ import annotations

import difflib
import re

from pipelink.common.diagnostics import Fact, Rejected, reject
from pipelink.linker.scratch import scratch_file
from pipelink.linker.toolkit import find_toolkit, run_tool

_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
_CODE_FOR = re.compile(r"^\s*code for (sm_\w+)")
_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;?\s*(/\*.*\*/)?\s*$")


class Sass(dict):
    """Function name -> normalized instructions; `arches`: the architectures the cubin holds code for."""

    arches: frozenset[str] = frozenset()


def disassemble(cubin: bytes, cuda_home: str | None = None, what: str = "cubin") -> Sass:
    """Function name -> normalized instructions. `what` names the input in diagnostics (the
    bytes go through a temporary file, whose name would mean nothing to the user)."""
    tk = find_toolkit(cuda_home)
    with scratch_file("sass", "input.cubin", cubin) as f:
        try:
            text = run_tool([tk.tool("cuobjdump"), "-sass", str(f)], "E-FILE", "cuobjdump -sass")
        except Rejected as e:  # cuobjdump is there (tk.tool checked it): the input is what it cannot read
            said = [Fact(x.side, x.text.replace(str(f), what), x.origin) for d in e.diagnostics for x in d.facts]
            raise reject("E-FILE", f"{what}: not a cubin (cuobjdump cannot read it)", facts=said,
                         hint="pass the .cubin files written by pipelink link (--cubin and --control-cubin)") from None
    funcs = Sass()
    arches: set[str] = set()
    current = None
    for line in text.splitlines():
        if m := _CODE_FOR.match(line):
            arches.add(m.group(1))
        elif m := _FUNC.match(line):
            current = m.group(1)
            funcs[current] = []
        elif current and (m := _INSN.search(line)):
            insn = m.group(1).strip()
            if insn:
                funcs[current].append(_normalize(insn))
    funcs.arches = frozenset(arches)
    return funcs


def _normalize(insn: str) -> str:
    insn = re.sub(r"\s+", " ", insn.rstrip(" ;"))
    # Branch targets are absolute offsets within the function; identical code has identical ones.
    return insn


def compare(linked: bytes, control: bytes, kernel: str | None = None, cuda_home: str | None = None,
            names: tuple[str, str] = ("linked cubin", "control cubin")) -> dict:
    """Per function: identical or the diff. Two cubins of different kernels or architectures are
    a usage error (E-USAGE), not a difference: a control only means something for its own kernel."""
    a, b = disassemble(linked, cuda_home, names[0]), disassemble(control, cuda_home, names[1])
    arch_a, arch_b = getattr(a, "arches", frozenset()), getattr(b, "arches", frozenset())
    if arch_a and arch_b and arch_a != arch_b:  # every instruction would differ: not a kernel and its control
        raise reject("E-USAGE", f"the two cubins are for different architectures ({', '.join(sorted(arch_a))} and "
                     f"{', '.join(sorted(arch_b))}): they are not a kernel and its control",
                     facts=[Fact(names[0], ", ".join(sorted(arch_a))), Fact(names[1], ", ".join(sorted(arch_b)))],
                     hint="compare <kernel>.cubin with the <kernel>.control.cubin the same link wrote (one --arch)")
    has = [Fact(names[0], ", ".join(sorted(a)) or "no functions"), Fact(names[1], ", ".join(sorted(b)) or "no functions")]
    if kernel is not None and (kernel not in a or kernel not in b):
        which = "neither cubin has" if kernel not in a and kernel not in b else \
            f"only the {names[0] if kernel in a else names[1]} has"
        raise reject("E-USAGE", f"--kernel {kernel}: {which} a function of that name", facts=has,
                     hint="name a kernel both cubins hold (the kernel file's [kernel] name), or leave --kernel out")
    if kernel is None and a and b and not set(a) & set(b):
        raise reject("E-USAGE", "the two cubins share no function: they are not a kernel and its control", facts=has,
                     hint="compare <kernel>.cubin with the <kernel>.control.cubin the same link wrote")
    names = [kernel] if kernel else sorted(set(a) | set(b))
    result = {"identical": True, "functions": {}}
    for n in names:
        la, lb = a.get(n, []), b.get(n, [])
        diff = list(difflib.unified_diff(lb, la, "control", "linked", lineterm="", n=1))
        same = la == lb and n in a and n in b
        renamed = not same and n in a and n in b and _unnumbered(la) == _unnumbered(lb)
        result["functions"][n] = {"identical": same, "registers_only": renamed, "linked_instructions": len(la),
                                  "control_instructions": len(lb), "diff": diff[:200]}
        result["identical"] &= same
    return result


_REGISTER = re.compile(r"\bU?[RP][0-9]+\b")


def _unnumbered(insns: list[str]) -> list[str]:
    """The instructions with register numbers dropped: two functions equal this way differ only
    in how registers were assigned (the same instruction stream; what a difference is made of
    matters to whoever chases it, the verdict stays "different")."""
    return [_REGISTER.sub(lambda m: m.group(0).rstrip("0123456789"), i) for i in insns]


def side_by_side(linked: bytes, control: bytes, kernel: str, width: int = 60, cuda_home: str | None = None) -> str:
    a = disassemble(linked, cuda_home).get(kernel, [])
    b = disassemble(control, cuda_home).get(kernel, [])
    rows = [f"{'linked':<{width}} | control", "-" * (2 * width + 3)]
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else ""
        y = b[i] if i < len(b) else ""
        mark = " " if x == y else "*"
        rows.append(f"{x[:width]:<{width}} |{mark}{y[:width]}")
    return "\n".join(rows)
