"""Typed facts: u64, i32 and bool besides u32. The handle returns the fact's C type, accept
is held to the type, an owner and a reader that disagree on the type are L-FACT-TYPE, and the
linked kernel is still exactly what one translation unit compiles to."""

from __future__ import annotations

import re

import pytest

from conftest import COMPONENTS, assert_mentions, diagnostic, kernel_text, line_of, rejected
from pipelink.linker.contract import parse_contract_text
from pipelink.linker.link import link, plan
from pipelink.linker.sass import compare, disassemble

ROLE = '[component]\nname = "c"\nkind = "role"\nentry = "run"\n[role]\nwarps = 1\nregs = [24, 64]\n'


def _fact(text: str):
    return parse_contract_text(ROLE + text, "c.contract.toml").facts[0]


def test_typed_values_parse():
    assert _fact('[fact.t]\ntype = "u64"\nown = 18446744073709551615\n').own == 2**64 - 1
    assert _fact('[fact.t]\ntype = "i32"\nown = -2147483648\n').own == -2**31
    f = _fact('[fact.t]\ntype = "bool"\nown = false\n')
    assert (f.own, f.own_text()) == (0, "own = false")
    r = _fact('[fact.t]\ntype = "i32"\naccept = { max = -1 }\n')
    assert r.accept_range == (-2**31, -1, 1) and r.accepts(-5) and not r.accepts(0)
    b = _fact('[fact.t]\ntype = "bool"\naccept = [true]\n')
    assert b.accepts(1) and not b.accepts(0) and b.accept_text() == "accept = [true]"


@pytest.mark.parametrize("text, needle", [
    ('[fact.t]\ntype = "i32"\nown = 2147483648\n', "must be in -2147483648..2147483647"),
    ('[fact.t]\nown = -1\n', "must be in 0..4294967295"),
    ('[fact.t]\nown = 4294967296\n', "must be in 0..4294967295"),
    ('[fact.t]\ntype = "u64"\nown = -1\n', "must be in 0..18446744073709551615"),
    ('[fact.t]\ntype = "bool"\nown = 1\n', "must be true or false"),
    ('[fact.t]\nown = true\n', "must be int"),
    ('[fact.t]\ntype = "bool"\naccept = { min = 0 }\n', "accepts a list, not a range"),
    ('[fact.t]\ntype = "bool"\naccept = [1]\n', "list of true/false"),
    ('[fact.t]\ntype = "i32"\naccept = [true]\n', "list of integers"),
    ('[fact.t]\ntype = "i32"\naccept = { min = -2147483649 }\n', "must be in -2147483648..2147483647"),
])
def test_values_outside_the_type_are_schema_errors(text, needle):
    d = diagnostic(rejected(parse_contract_text, ROLE + text, "c.contract.toml"), "C-SCHEMA")
    assert_mentions(d, needle)


@pytest.fixture(scope="module")
def typed(component):
    return component("typed_owner"), component("typed_reader")


def _kernel(packer, pkgs, extra=""):
    return packer.compose(kernel_text("typed", ("own", "typed_owner"), ("read", "typed_reader"), extra=extra), pkgs)


def test_typed_handles_link_to_the_control(packer, typed):
    res = link(_kernel(packer, typed), control=True)
    src = res.source
    assert 'extern "C" __device__ unsigned long long pl_typed_reader__fact__big(unsigned i) { return 5000000000ull; }' in src
    assert 'extern "C" __device__ int pl_typed_reader__fact__offset(unsigned i) { return -7; }' in src
    assert 'extern "C" __device__ bool pl_typed_reader__fact__flag(unsigned i) { return true; }' in src
    assert res.manifest["facts"] == {"big": 5000000000, "offset": -7, "flag": 1}
    assert typed[0].measured.own_facts == {"pl_typed_owner__own__big": 5000000000,
                                           "pl_typed_owner__own__offset": -7, "pl_typed_owner__own__flag": 1}
    cmp = compare(res.cubin, res.control_cubin, "typed")
    assert cmp["identical"], "\n".join(cmp["functions"]["typed"]["diff"][:60])
    sass = "\n".join(disassemble(res.cubin)["typed"])
    assert "CALL" not in sass  # every handle folded


def test_owner_and_reader_disagree_on_the_type(packer, typed):
    reader = packer.variant(typed[1], typed[1].contract_text.replace(
        'type = "u64"\naccept = { min = 4294967296 }', 'type = "u32"\naccept = { min = 1 }'))
    d = diagnostic(rejected(plan, _kernel(packer, [typed[0], reader])), "L-FACT-TYPE")
    assert d.clause == "fact.big.type"
    assert_mentions(d, "own (typed_owner)", "read (typed_reader)", "'u64'", "'u32'",
                    line_of(typed[0].contract.file, "[fact.big]"), line_of(reader.contract.file, "[fact.big]"))
    assert d.hint


def test_typed_accept(packer, typed):
    reader = packer.variant(typed[1], typed[1].contract_text.replace("accept = [true]", "accept = [false]")
                            .replace("min = -100, max = 100", "min = 0, max = 100"))
    rej = rejected(plan, _kernel(packer, [typed[0], reader]))
    texts = [d.render() for d in rej.diagnostics if d.code == "L-FACT-ACCEPT"]
    assert len(texts) == 2
    assert any("own = true" in t and "accept = [false]" in t for t in texts)
    assert any("own = -7" in t and "min = 0" in t for t in texts)


def test_pack_reads_typed_owned_values_back(packer, typed):
    """PTX prints an i32 -7 and a bool as it likes; pack reads them in the contract's type."""
    d = diagnostic(rejected(packer.variant, typed[0], typed[0].contract_text.replace("own = -7", "own = -8")),
                   "P-FACT-VALUE")
    assert_mentions(d, "own = -8", "PL_OWN_FACT_I32(offset, -7)")
    d = diagnostic(rejected(packer.variant, typed[0], typed[0].contract_text.replace("own = true", "own = false")),
                   "P-FACT-VALUE")
    assert_mentions(d, "own = false")


def test_header_has_typed_macros():
    header = (COMPONENTS.parents[1] / "tools" / "pipelink" / "include" / "pipelink.h").read_text()
    for m in ("PL_DECLARE_FACT_U64", "PL_DECLARE_FACT_I32", "PL_DECLARE_FACT_BOOL",
              "PL_OWN_FACT_U64", "PL_OWN_FACT_I32", "PL_OWN_FACT_BOOL"):
        assert re.search(rf"#define {m}\(", header), m
