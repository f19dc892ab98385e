"""Linked-SASS checks that keep a one-sided change of a role's size or register range from
linking silently (the geometry-mutation hunt, tools/pipelink/linker/linked_checks.py):

* setmaxnreg: when a role's code needs more registers than the solver's budget, ptxas drops
  every setmaxnreg of the kernel with only an info line (C7507): the map said `main 56
  registers`, the kernel ran all warps at 168. Now L-REGS naming the role and its trial count.
* named barriers: a contract's `threads` was read by nothing but range checks, so
  `[barrier.epi] threads = 128` beside a `bar.sync id, 256` in the code, or `[role] warps = 4`
  for code written for two warpgroups (`threads = "role"`), linked and hung. Now the counts in
  the SASS must be the clauses' (L-BARRIER-THREADS, both sides, the contract's file:line).

Fake SASS for the rules (no toolkit); the real mutations on the Hopper GEMM and attention
packages when they are built (skipped otherwise: `tools/bazel build //kernels:gemm_swiglu_tma
//kernels/attention:attn_causal`)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

import pipelink.linker.sass
from conftest import ROOT, assert_mentions, diagnostic, rejected
from pipelink.linker.check_types import Barrier
from pipelink.linker.linked_checks import check_linked

BIN = ROOT / "bazel-bin" / "kernels"


def _role(name, budget_regs, measured, origin):
    return NS(inst=NS(name=name, contract=NS(role=NS(origin=origin))), regs=budget_regs, measured_regs=measured)


def _fake(monkeypatch, sass, *, budgets, group_budgets, entry, barriers=(), ids=None, threads=384):
    monkeypatch.setattr(pipelink.linker.sass, "disassemble", lambda cubin, home: {"k": list(sass)})
    roles = [_role("load", (24, 40), 58, "load.contract.toml:30"), _role("main", (24, 56), 255, "main.contract.toml:20")]
    ch = NS(comp=NS(name="k"), roles=roles, barriers=list(barriers))
    pl = NS(budgets=budgets, barrier_ids=ids or {}, group_budgets=group_budgets, entry_regs=entry, threads=threads,
            uses_setmaxnreg=any(b != entry for b in group_budgets))
    return ch, pl


def test_setmaxnreg_dropped_by_ptxas_is_l_regs(monkeypatch):
    ch, pl = _fake(monkeypatch, ["BAR.SYNC.DEFER_BLOCKING 0x0", "EXIT"], budgets={"load": 40, "main": 56},
                   group_budgets=[40, 56, 56], entry=168)
    e = rejected(check_linked, ch, pl, b"", {"REG": 168}, NS(home=""))
    d = diagnostic(e, "L-REGS")
    assert_mentions(d, "ignored the register budgets [40, 56]", "budgets found: none", "168 registers",
                    "main.contract.toml:20", "load.contract.toml:30")
    assert re.search(r"most likely main \(budget 56, trial compile 255\), then load", d.hint), d.hint


def test_setmaxnreg_kept_links(monkeypatch):
    sass = ["USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8", "@P0 USETMAXREG.DEALLOC.CTAPOOL 0x28"]
    ch, pl = _fake(monkeypatch, sass, budgets={"load": 40, "main": 232}, group_budgets=[40, 232, 232], entry=168)
    assert check_linked(ch, pl, b"", {"REG": 168}, NS(home="")) == []
    # A budget equal to the launch's needs no setmaxnreg, and none is looked for.
    ch, pl = _fake(monkeypatch, [], budgets={"load": 168, "main": 168}, group_budgets=[168, 168, 168], entry=168)
    assert check_linked(ch, pl, b"", {"REG": 168}, NS(home="")) == []


def _bars():
    return [Barrier("main.fixup", 256, "main (wgmma_consumer) at main.contract.toml:51"),
            Barrier("epi.epi", 128, "epi (swiglu) at swiglu.contract.toml:37")]


@pytest.mark.parametrize("insn, code", [
    ("BAR.SYNC.DEFER_BLOCKING 0x1, 0x100", None),            # main.fixup: 256, as its clause says
    ("@!P0 BAR.ARV 0x2, 0x80", None),                        # epi.epi: 128
    ("BAR.SYNC.DEFER_BLOCKING 0x2, 0x100", "L-BARRIER-THREADS"),
    ("@P1 BAR.ARV 0x1, 0x80", "L-BARRIER-THREADS"),
    ("BAR.SYNC.DEFER_BLOCKING 0x1", "L-BARRIER-THREADS"),    # no count: the whole block (384)
    ("BAR.SYNC.DEFER_BLOCKING 0x2, R3", None),               # a count in a register: not checkable
    ("BAR.SYNC.DEFER_BLOCKING 0x0", None),                   # __syncthreads
])
def test_barrier_counts_in_the_sass_are_the_contracts(monkeypatch, insn, code):
    ch, pl = _fake(monkeypatch, [insn], budgets={"load": 168, "main": 168}, group_budgets=[168] * 3, entry=168,
                   barriers=_bars(), ids={"main.fixup": 1, "epi.epi": 2})
    if code is None:
        assert check_linked(ch, pl, b"", {"REG": 168}, NS(home="")) == []
        return
    d = diagnostic(rejected(check_linked, ch, pl, b"", {"REG": 168}, NS(home="")), code)
    assert d.hint and len(d.facts) == 2 and insn in d.facts[0].text
    assert re.search(r"\.toml:\d+$", d.facts[1].origin)


# ---- the real packages: one owner's contract changed, its code not ----------------------------

def _packages(*names):
    from pipelink.linker.package_io import read_package

    paths = [BIN / n for n in names]
    if not all(p.exists() for p in paths):
        pytest.skip("build them first: tools/bazel build //kernels:gemm_swiglu_tma //kernels/attention:attn_causal")
    return [read_package(str(p)) for p in paths]


GEMM = ("tile_scheduler.plpkg", "tma_loader.plpkg", "gemm_swiglu_tma_consumer.plpkg", "swiglu_tma_store.plpkg")
ATTN = ("attention/attn_loader.plpkg", "attention/attn_core.plpkg", "attention/attn_causal_mask.plpkg",
        "attention/attn_store.plpkg")


@pytest.mark.parametrize("kernel, names, which, old, new, code", [
    ("kernels/gemm_swiglu/gemm_swiglu_tma.kernel.toml", GEMM, 2, "regs = [168, 240]", "regs = [24, 56]", "L-REGS"),
    ("kernels/gemm_swiglu/gemm_swiglu_tma.kernel.toml", GEMM, 2, "warps = 8", "warps = 4", "L-BARRIER-THREADS"),
    ("kernels/gemm_swiglu/gemm_swiglu_tma.kernel.toml", GEMM, 3, "threads = 256", "threads = 128",
     "L-BARRIER-THREADS"),
    ("kernels/attention/attn_prefill.kernel.toml", ATTN, 1, "warps = 8", "warps = 4", "L-BARRIER-THREADS"),
])
def test_a_one_sided_role_change_is_refused_at_link(packer, tmp_path, kernel, names, which, old, new, code):
    from pipelink.linker.compose import parse_kernel
    from pipelink.linker.link import link

    pkgs = _packages(*names)
    text = pkgs[which].contract_text
    assert old in text
    pkgs[which] = packer.variant(pkgs[which], text.replace(old, new, 1))
    e = rejected(link, parse_kernel(str(ROOT / kernel), pkgs))
    if e.codes == ["E-TOOLKIT"] and code != "E-TOOLKIT":  # the GPU machine carries bazel-bin, not the toolkit
        pytest.skip(f"no CUDA toolkit to link with here: {e.diagnostics[0].message}")
    assert e.codes == [code], e.codes
    d = e.diagnostics[0]
    assert d.hint and any(re.search(r"\.toml:\d+$", f.origin) for f in d.facts)


DECODE = ("attention/attn_loader_q1.plpkg", "attention/attn_core.plpkg", "attention/attn_decode_mask.plpkg",
          "attention/attn_combine.plpkg")


def test_a_library_barrier_wider_than_its_calling_role_is_refused_at_plan(packer):
    """attn_combine (a library: its `sync` barrier counts 256, the core's two warpgroups) runs in
    attn_core's warps. attn_core given 4 warps, consistently (its own barriers count "role"),
    would leave the combine's bar.sync 256 waiting for threads that do not exist."""
    from pipelink.linker.compose import parse_kernel
    from pipelink.linker.link import plan

    pkgs = _packages(*DECODE)
    pkgs[1] = packer.variant(pkgs[1], pkgs[1].contract_text.replace("warps = 8", "warps = 4", 1))
    d = diagnostic(rejected(plan, parse_kernel(str(ROOT / "kernels/attention/attn_decode.kernel.toml"), pkgs)),
                   "L-BARRIER-THREADS")
    assert "256" in d.message and "128" in d.message and d.hint
    assert {"epi (attn_combine)", "core (attn_core)"} <= {f.side for f in d.facts}
    assert all(re.search(r"\.toml:\d+$", f.origin) for f in d.facts)
