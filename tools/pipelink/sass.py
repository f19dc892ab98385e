"""Normalized SASS of a cubin, and the linked-vs-control comparison.

Normalization drops what legitimately differs between two builds of the same code
(addresses, encodings, comments, the order of unrelated sections) and keeps the
instructions and their operands, so "identical" means the same machine code.
"""

from __future__ import annotations

import difflib
import re
import tempfile
from pathlib import Path

from pipelink.diagnostics import Fact, Rejected, reject
from pipelink.toolkit import find_toolkit, run_tool

_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;?\s*(/\*.*\*/)?\s*$")


def disassemble(cubin: bytes, cuda_home: str | None = None) -> dict[str, list[str]]:
    tk = find_toolkit(cuda_home)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            text = run_tool([tk.tool("cuobjdump"), "-sass", f.name], "E-FILE", "cuobjdump -sass")
        except Rejected as e:  # cuobjdump is there (tk.tool checked it): the input is what it cannot read
            raise reject("E-FILE", "not a cubin: cuobjdump cannot read it", facts=[x for d in e.diagnostics for x in d.facts],
                         hint="pass the .cubin files written by pipelink link (--cubin and --control-cubin)") from None
    funcs: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if m := _FUNC.match(line):
            current = m.group(1)
            funcs[current] = []
        elif current and (m := _INSN.search(line)):
            insn = m.group(1).strip()
            if insn:
                funcs[current].append(_normalize(insn))
    return funcs


def _normalize(insn: str) -> str:
    insn = re.sub(r"\s+", " ", insn.rstrip(" ;"))
    # Branch targets are absolute offsets within the function; identical code has identical ones.
    return insn


def compare(linked: bytes, control: bytes, kernel: str | None = None, cuda_home: str | None = None) -> dict:
    a, b = disassemble(linked, cuda_home), disassemble(control, cuda_home)
    if kernel is not None and kernel not in a and kernel not in b:
        raise reject("E-USAGE", f"--kernel {kernel}: neither cubin has a function of that name",
                     facts=[Fact("linked cubin", ", ".join(sorted(a)) or "no functions"),
                            Fact("control cubin", ", ".join(sorted(b)) or "no functions")],
                     hint="name the kernel (the kernel file's [kernel] name), or leave --kernel out to compare all")
    names = [kernel] if kernel else sorted(set(a) | set(b))
    result = {"identical": True, "functions": {}}
    for n in names:
        la, lb = a.get(n, []), b.get(n, [])
        diff = list(difflib.unified_diff(lb, la, "control", "linked", lineterm="", n=1))
        same = la == lb and n in a and n in b
        result["functions"][n] = {"identical": same, "linked_instructions": len(la),
                                  "control_instructions": len(lb), "diff": diff[:200]}
        result["identical"] &= same
    return result


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
