"""Attention's geometry mutations (experiments/symbol_link/attention_mutations.bzl, the rule of
experiments/symbol_link/counterexample.bzl): one owner of attn_causal / attn_decode changes a block, head dim,
ring depth, stage size or tile shape; pipelink must propagate it (every part agrees) or reject
it with a coded diagnostic (clause, both sides' file:line, a hint) and leave no output.

CPU: each row's outcome from the built results (skipped until
`tools/bazel build //experiments:attn_causal_mutations //experiments:attn_decode_mutations`),
and the rule that keeps a mismatch from linking silently: only the core (the owner of block_q
and head_dim) names its build constants; every other attention component reads the linked facts
and declares what it accepts. The GPU run (plain links vs pipelink's) is
tests/linker/test_symbol_link_counterexample.py's, over the same index."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "kernels" / "attention"
BIN = ROOT / "bazel-bin" / "experiments"
TARGETS = "//experiments:attn_causal_mutations //experiments:attn_decode_mutations"

# row -> ("linked", facts, ring depths) or ("rejected", the codes, who is named). Before the
# readers took block_q / head_dim from the link, mask_block64 (both kernels) and combine_d64
# LINKED with the core at 128 while the variant counted 64-row blocks / the combine strode 64.
EXPECTED = {
    "attn_causal": {
        "core_d64": ("linked", {"block_q": 128, "head_dim": 64}, {"q": 2, "kv": 6}),
        "core_block64": ("rejected", {"L-FACT-ACCEPT"}, ["load (attn_loader)", "mask (attn_mask)", "epi (attn_store)"]),
        "loader_qdepth3": ("rejected", {"L-RING-DEPTH"}, ["load (attn_loader)", "core (attn_core)"]),
        "loader_kvdepth4": ("linked", {"block_q": 128, "head_dim": 128}, {"q": 2, "kv": 4}),
        "loader_kvstage": ("rejected", {"L-RING-STAGE"}, ["load (attn_loader)", "core (attn_core)"]),
        "mask_block64": ("rejected", {"L-FACT-ACCEPT"}, ["mask (attn_mask)", "core (attn_core)"]),
        "store_shape64": ("rejected", {"L-TENSOR-SHAPE"}, ["epi (attn_store)", "core (attn_core)"]),
    },
    "attn_decode": {
        "core_d64": ("linked", {"block_q": 128, "head_dim": 64}, {"q": 1, "kv": 6}),  # the combine takes 64 too
        "combine_d64": ("linked", {"block_q": 128, "head_dim": 128}, {"q": 1, "kv": 6}),  # (decode: attn_loader_q1)
        "mask_block64": ("rejected", {"L-FACT-ACCEPT"}, ["mask (attn_mask)", "core (attn_core)"]),
    },
}
ROWS = [(k, r) for k, rows in EXPECTED.items() for r in rows]


def _index(kernel: str) -> dict:
    path = BIN / f"{kernel}_mutations.json"
    if not path.exists():
        pytest.skip(f"build it first: tools/bazel build {TARGETS}")
    return json.loads(path.read_text())


def _row(kernel: str, name: str) -> tuple[dict, dict]:
    (m,) = [m for m in _index(kernel)["mutations"] if m["name"] == name]
    files = {k: ROOT / "bazel-bin" / v for k, v in m["files"].items()}
    return m, files


@pytest.mark.parametrize("kernel", sorted(EXPECTED))
def test_every_row_has_an_expected_outcome(kernel):
    index = _index(kernel)
    assert index["kernel"] == kernel
    assert [m["name"] for m in index["mutations"]] == list(EXPECTED[kernel])
    owners = {m["owner"] for m in index["mutations"]}
    assert owners >= ({"core", "load", "mask", "epi"} if kernel == "attn_causal" else {"core", "mask", "epi"})


@pytest.mark.parametrize("kernel,name", ROWS)
def test_row_propagates_or_rejects(kernel, name):
    _, files = _row(kernel, name)
    result = json.loads(files["pipelink.json"].read_text())
    want = EXPECTED[kernel][name]
    assert result["outcome"] == want[0], result
    if want[0] == "linked":
        assert result["codes"] == [] and result["facts"] == want[1] and result["ring_depths"] == want[2]
        manifest = json.loads(files["pipelink.manifest.json"].read_text())
        assert manifest["facts"] == want[1]
        assert files["pipelink.cubin"].read_bytes()[:4] == b"\x7fELF"
        return
    assert set(result["codes"]) == want[1], result  # the specific code, no follow-on diagnostics
    # Nothing partial: a rejection leaves the cubin and manifest empty (Bazel needs the files).
    assert files["pipelink.cubin"].stat().st_size == 0 and files["pipelink.manifest.json"].stat().st_size == 0
    named = set()
    for d in result["diagnostics"]:
        assert d["code"] in want[1] and d["clause"] and d["hint"], d
        assert len(d["facts"]) >= 2, d  # both sides
        for f in d["facts"]:
            assert re.search(r"\.toml:\d+$", f["origin"]), d  # each side's contract file:line
            named.add(f["side"])
    assert set(want[2]) <= named, (named, want[2])


def test_plain_link_bakes_in_the_original_facts():
    """The baseline's glue is the original's: the d = 64 core gets head_dim 128 everywhere else."""
    _, files = _row("attn_causal", "core_d64")
    plain = json.loads(files["plain.manifest.json"].read_text())
    assert plain["facts"] == {"block_q": 128, "head_dim": 128} and plain["plain_link"]["mutant"] == "attn_core"
    assert files["plain.cubin"].read_bytes()[:4] == b"\x7fELF"


# ---- the class: a hard-coded geometry constant must be a declared, checked fact ---------------

CORE_CONSTANTS = re.compile(r"\battn::(BLOCK|HEAD_DIM|CHUNK_BYTES|TILE_BYTES)\b|\bATTN_(BLOCK_Q|HEAD_DIM)\b")
CORE_FILES = {"attn.h", "attn_core.cu", "attn_wgmma.h"}  # the owner of block_q and head_dim


def _code(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


def test_only_the_core_names_its_build_constants():
    """A reader holding attn::BLOCK / HEAD_DIM (or building with ATTN_BLOCK_Q / ATTN_HEAD_DIM)
    would link with any core: its value is nowhere in its contract. Readers use PL_FACT."""
    files = sorted(p for p in SRC.iterdir() if p.suffix in (".cu", ".h") and p.name not in CORE_FILES)
    assert len(files) >= 15
    bad = [f"{p.name}:{n}: {line.strip()}" for p in files
           for n, line in enumerate(_code(p.read_text()).splitlines(), 1) if CORE_CONSTANTS.search(line)]
    assert not bad, "read the core's facts instead (PL_FACT(block_q) / PL_FACT(head_dim)):\n" + "\n".join(bad)


def _contracts() -> dict[str, dict]:
    return {p.name: tomllib.loads(p.read_text()) for p in sorted(SRC.glob("*.contract.toml"))}


def test_core_owns_the_geometry_and_every_reader_accepts_it():
    contracts = _contracts()
    for name, c in contracts.items():
        facts = c.get("fact", {})
        if name.startswith("attn_core"):
            assert set(facts) == {"block_q", "head_dim"} and all("own" in f for f in facts.values()), name
            continue
        for fact, decl in facts.items():
            assert "own" not in decl and decl.get("accept"), f"{name}: [fact.{fact}] needs accept = [...]"
    # Every component that counts rows in blocks reads block_q (the variant interface included).
    for name in ("attn_loader", "attn_cp_loader", "attn_mask", "attn_store", "attn_combine"):
        assert contracts[f"{name}.contract.toml"]["fact"]["block_q"]["accept"] == [128], name
    # Every source of a reader reads the facts its contract declares through the handle.
    for src in ("attn_loader.cu", "attn_cp_loader.cu", "attn_store.cu", "attn_combine.cu", "attn_variant.h"):
        assert "PL_FACT(block_q)" in (SRC / src).read_text(), src
    assert "PL_FACT(head_dim)" in _code((SRC / "attn_combine.cu").read_text())
