"""Warp collectives are never in a short-circuited operand.

`__shfl_sync(0xffffffff, ...)` and its kin need every lane of the mask to execute them. Written
after `&&`, `||` or `?` in one statement, they run only on the lanes whose left side lets them:
the other lanes never arrive. On sm_90 that read garbage registers (memcheck: misaligned
16-byte loads in moe_step's combine) or hung, depending on how ptxas emitted the collective.
This scans every component source; control-flow divergence inside `if` bodies is the
sanitizers' job (synccheck), not this test's.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("kernels", "examples", "tools/pipelink/include", "tests/components")
COLLECTIVE = re.compile(r"\b__(shfl(_up|_down|_xor)?_sync|ballot_sync|any_sync|all_sync|uni_sync|"
                        r"match_(any|all)_sync|reduce_\w+_sync|syncwarp)\s*\(")


def _statements(text: str):
    """(line, statement) pairs of C++ source without comments or string literals; a statement
    ends at `;`, `{` or `}` (a for header's clauses are separate statements)."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    buf, line, start = [], 1, 1
    for ch in text:
        buf.append(ch)
        line += ch == "\n"
        if ch in "{};":
            yield start, "".join(buf)
            buf, start = [], line


def conditional_collectives(text: str) -> list[tuple[int, str]]:
    """Statements where a warp collective follows `&&`, `||` or `?` (so only some lanes may run it)."""
    hits = []
    for line, stmt in _statements(text):
        for m in COLLECTIVE.finditer(stmt):
            if re.search(r"&&|\|\||\?", stmt[:m.start()]):
                hits.append((line, " ".join(stmt.split())[:160]))
    return hits


def test_the_scan_finds_the_moe_combine_bug():
    bad = "const bool pending = j < wn && !(__shfl_sync(0xffffffffu, done, j % 32) >> (j / 32) & 1u);"
    assert conditional_collectives(bad)
    assert conditional_collectives("v = lane < 8 ? __ballot_sync(~0u, p) : 0u;")
    assert conditional_collectives("ok = a || __any_sync(~0u, b);")
    fixed = ("const unsigned seen = __shfl_sync(0xffffffffu, done, j % 32);\n"
             "const bool pending = j < wn && !(seen >> (j / 32) & 1u);")
    assert not conditional_collectives(fixed)
    assert not conditional_collectives("x = __shfl_sync(~0u, v, 0) ? a : b; // && __shfl_sync(")


def test_no_component_source_runs_a_collective_conditionally():
    found = []
    for top in SOURCES:
        for f in sorted((ROOT / top).rglob("*")):
            if f.suffix in (".cu", ".h", ".cuh") and f.is_file():
                found += [f"{f.relative_to(ROOT)}:{ln}: {s}" for ln, s in conditional_collectives(f.read_text())]
    assert not found, "warp collectives in a short-circuited operand (hoist them out):\n" + "\n".join(found)
