"""The class behind the silent geometry links: a build constant one owner can change must
stay that owner's. A tile macro a component source defines (`#ifndef EXPERT_BLOCK_M` /
`#define EXPERT_BLOCK_M 64`, overridden by its target's defines) is named by no other source:
readers get the value through PL_FACT, so a mutation of the owner reaches them through the
linker (propagated or rejected), never as a stale copy. The attention core's header-defined
build constants have their own test (tests/kernels/test_attention_mutations.py). No Bazel needed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conftest import assert_mentions, diagnostic, rejected, require_cutlass

KERNELS = Path(__file__).resolve().parents[2] / "kernels"
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


# ---- a source constant that sizes a shared-memory claim must be an owned fact ---------------

MOE = KERNELS / "moe"


def test_the_experts_stage_count_sizes_its_claims_through_an_owned_fact():
    """expert.cu's ring stage count sizes [smem.stages] and [smem.bars]. It was a bare
    `STAGES = 4` with the contract's `8 * (...)` / `bytes = 64` beside it: STAGES = 5 in the
    source alone linked silently and overran the claims by 49 KB (moe_step's mutation hunt).
    Now the contract computes both claims from the owned fact expert_stages."""
    import tomllib

    text = _code((MOE / "expert.cu").read_text())
    assert re.search(r"constexpr unsigned STAGES = WGS == 1 \? EXPERT_STAGES : EXPERT_TEAM_STAGES\b", text)
    assert "PL_OWN_FACT(expert_stages, moe_expert::Solo::STAGES)" in text
    assert "PL_OWN_FACT(team_stages, moe_expert::Team::STAGES)" in text
    c = tomllib.loads((MOE / "expert.contract.toml").read_text())
    assert c["fact"]["expert_stages"]["own"] == 4 and c["fact"]["team_stages"]["own"] == 6
    for claim in ("stages", "bars"):
        assert "expert_stages" in c["smem"][claim]["bytes"] and "team_stages" in c["smem"][claim]["bytes"], claim


def test_every_claim_of_a_real_component_is_sized_by_facts():
    """A literal claim size is a copy of a source constant nothing checks: each [smem.X] of a
    kernels/ contract is an expression over facts (a flag word of <= 16 B excepted)."""
    import tomllib

    bad = []
    for p in sorted(KERNELS.rglob("*.contract.toml")):
        c = tomllib.loads(p.read_text())
        facts = set(c.get("fact", {}))
        for name, claim in c.get("smem", {}).items():
            b = claim["bytes"]
            if isinstance(b, int) and b <= 16:
                continue
            if not (isinstance(b, str) and facts & set(re.findall(r"[A-Za-z_]\w*", b))):
                bad.append(f"{p.relative_to(KERNELS)}: [smem.{name}] bytes = {b!r}")
    assert not bad, "size the claim from the owner's facts:\n" + "\n".join(bad)


@pytest.fixture(scope="module")
def expert_objects(lto):
    cutlass = require_cutlass()
    src = MOE / "expert.cu"
    return {s: lto(src, defines=[f"EXPERT_STAGES={s}"], includes=[cutlass]) for s in (3, 4)}


# Both counts fit shared memory, so pack reaches the fact check (5 stages of the default tile
# would not: P-LIMIT refuses such a contract before any object is read).
@pytest.mark.parametrize("source,contract", [(3, 4), (4, 3)])
def test_a_stage_count_on_one_side_only_is_refused_at_pack(expert_objects, packer, source, contract):
    text = (MOE / "expert.contract.toml").read_text()
    stages = "[fact.expert_stages]"
    head, _, tail = text.partition(stages)
    assert stages in text and "\nown = 4\n" in tail.partition("\n[")[0]
    path = packer.contract_file(head + stages + tail.replace("\nown = 4\n", f"\nown = {contract}\n", 1),
                                "moe_expert")
    shutil.copy(MOE / "expert_host.py", path.parent / "expert_host.py")
    e = rejected(packer.pack, path, [expert_objects[source]])
    d = diagnostic(e, "P-FACT-VALUE")
    assert e.codes == ["P-FACT-VALUE"] and d.hint
    assert_mentions(d, f"own = {contract}", f"PL_OWN_FACT(expert_stages, {source})", f"{path}:")


def test_a_schedule_size_on_the_contract_side_only_is_refused_at_pack(expert_objects, packer):
    """[smem.sched] is sized by the owned fact sched_bytes (sizeof the expert's Sched table of one
    chunk of 128 experts, times the chunks): a contract that states another size than the
    source's table is refused at pack, never an overflow into the next claim."""
    text = (MOE / "expert.contract.toml").read_text()
    assert text.count("own = 2048") == 1 and 'bytes = "sched_bytes * ceil_div(experts, 128)"' in text
    path = packer.contract_file(text.replace("own = 2048", "own = 1024"), "moe_expert")
    shutil.copy(MOE / "expert_host.py", path.parent / "expert_host.py")
    e = rejected(packer.pack, path, [expert_objects[4]])
    d = diagnostic(e, "P-FACT-VALUE")
    assert e.codes == ["P-FACT-VALUE"] and d.hint
    assert_mentions(d, "own = 1024", "PL_OWN_FACT(sched_bytes, 2048)", f"{path}:")
