"""The class behind the silent geometry links: a build constant one owner can change must
stay that owner's. A tile macro a component source defines (`#ifndef EXPERT_BLOCK_M` /
`#define EXPERT_BLOCK_M 64`, overridden by its target's defines) is named by no other source:
readers get the value through PL_FACT, so a mutation of the owner reaches them through the
linker (propagated or rejected), never as a stale copy. The attention core's header-defined
build constants have their own test (tests/test_attention_mutations.py). No Bazel needed."""

from __future__ import annotations

import re
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
OVERRIDABLE = re.compile(r"^#ifndef (\w+)\s*\n#define \1\b", re.M)


def _code(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


def _sources() -> dict[Path, str]:
    return {p: _code(p.read_text()) for p in sorted(KERNELS.rglob("*")) if p.suffix in (".cu", ".h")}


def test_a_components_tile_macros_are_named_only_by_it():
    sources = _sources()
    owners: dict[str, set[Path]] = {}  # macro -> the component sources that define it (two consumers share names)
    for p, text in sources.items():
        if p.suffix == ".cu":
            for m in OVERRIDABLE.findall(text):
                owners.setdefault(m, set()).add(p)
    assert {"EXPERT_BLOCK_M", "CONSUMER_BLOCK_N", "PINGPONG_BLOCK_M", "MAINLOOP_BLOCK_K"} <= set(owners), owners
    bad = [f"{q.relative_to(KERNELS)}:{n}: {line.strip()}  (owned by {sorted(o.name for o in owners[m])})"
           for m in sorted(owners) for q, text in sources.items() if q not in owners[m]
           for n, line in enumerate(text.splitlines(), 1) if re.search(rf"\b{m}\b", line)]
    assert not bad, "read the owner's fact through PL_FACT instead:\n" + "\n".join(bad)


def test_every_owned_block_macro_feeds_an_owned_fact():
    """A BLOCK macro that changes the owner's tile but no declared fact would change the
    geometry behind every reader's back: each one ends in PL_OWN_FACT (directly or through
    the constant it sets)."""
    for p, text in _sources().items():
        if p.suffix != ".cu":
            continue
        for m in OVERRIDABLE.findall(text):
            if "_BLOCK_" not in m:
                continue
            consts = set(re.findall(rf"\b(\w+)\s*=\s*{m}\b", text))  # constexpr unsigned BM = EXPERT_BLOCK_M
            owns = re.findall(r"PL_OWN_FACT\(\w+,\s*([\w:]+)\)", text)
            assert any(o == m or o.split("::")[-1] in consts for o in owns), f"{p.name}: {m} feeds no PL_OWN_FACT"
