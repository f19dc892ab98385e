"""Kernel-owned facts: the kernel file (the composition) owns `[fact.X] own = V`, so one set of
component packages serves many models, each one more link and no recompile. Readers are held
to the kernel's value as to a component owner's, and the handles still fold at LTO: the linked
SASS equals the single-translation-unit control."""

from __future__ import annotations

import pytest

from conftest import assert_mentions, diagnostic, kernel_text, line_of, rejected
from pipelink.linker.link import link, plan
from pipelink.linker.sass import compare, disassemble

MODEL_A = '[fact.big]\ntype = "u64"\nown = 8589934592\n\n[fact.offset]\ntype = "i32"\nown = -3\n\n[fact.flag]\ntype = "bool"\nown = true\n'
MODEL_B = MODEL_A.replace("8589934592", "4294967296").replace("-3", "42")


@pytest.fixture(scope="module")
def reader(component):
    return component("typed_reader")


def _kernel(packer, pkgs, facts, *instances, name="kf"):
    text = kernel_text(name, ("read", "typed_reader"), *instances) + "\n" + facts
    return packer.compose(text, pkgs, name=name)


def test_kernel_facts_link_to_the_control_one_package_many_models(packer, reader):
    res_a = link(_kernel(packer, [reader], MODEL_A), control=True)
    res_b = link(_kernel(packer, [reader], MODEL_B), control=True)
    assert res_a.manifest["facts"] == {"big": 8589934592, "offset": -3, "flag": 1}
    assert res_b.manifest["facts"] == {"big": 4294967296, "offset": 42, "flag": 1}
    assert 'pl_typed_reader__fact__big(unsigned i) { return 8589934592ull; }' in res_a.source
    assert 'pl_typed_reader__fact__offset(unsigned i) { return -3; }' in res_a.source
    assert 'pl_typed_reader__fact__offset(unsigned i) { return 42; }' in res_b.source
    assert res_a.cubin != res_b.cubin  # the same package, another model
    for res in (res_a, res_b):
        cmp = compare(res.cubin, res.control_cubin, "kf")
        assert cmp["identical"], "\n".join(cmp["functions"]["kf"]["diff"][:60])
        assert "CALL" not in "\n".join(disassemble(res.cubin)["kf"])  # folded to immediates
    assert "big = 8589934592 (owner kernel)" in res_a.map_text


def test_kernel_fact_nothing_reads(packer, reader):
    comp = _kernel(packer, [reader], MODEL_A + '\n[fact.hiden]\nown = 4096\n')
    d = diagnostic(rejected(plan, comp), "L-FACT-UNREAD")
    assert d.clause == "fact.hiden"
    assert_mentions(d, "kernel kf", "own = 4096", line_of(comp.file, "own = 4096"), "facts read: big, flag, offset")
    assert "remove [fact.hiden]" in d.hint


def test_kernel_fact_read_by_the_grid_only(packer, reader):
    text = (kernel_text("kg", ("read", "typed_reader")).replace("grid = [1, 1, 1]", 'grid = ["blocks", 1, 1]')
            + "\n" + MODEL_A + '\n[fact.blocks]\nown = 4\n')
    ch, _, _, _ = plan(packer.compose(text, [reader], name="kg"))
    assert ch.facts["blocks"] == 4 and ch.fact_owner["blocks"] is None


def test_reader_cannot_accept_the_kernels_value(packer, reader):
    comp = _kernel(packer, [reader], MODEL_A.replace("own = -3", "own = 1000"))
    d = diagnostic(rejected(plan, comp), "L-FACT-ACCEPT")
    assert d.clause == "fact.offset"
    assert_mentions(d, "kernel kf", "own = 1000", line_of(comp.file, "own = 1000"),
                    "read (typed_reader)", "min = -100", line_of(reader.contract.file, "min = -100"))


def test_kernel_and_component_both_own(packer, reader, component):
    owner = component("typed_owner")
    comp = _kernel(packer, [reader, owner], MODEL_A, ("own", "typed_owner"))
    d = diagnostic(rejected(plan, comp), "L-FACT-OWNERS")
    assert_mentions(d, "kernel kf", line_of(comp.file, "own = 8589934592"), "own (typed_owner)",
                    line_of(owner.contract.file, "[fact.big]"))
    assert "one owner" in d.hint


def test_kernel_fact_of_another_type(packer, reader):
    comp = _kernel(packer, [reader], MODEL_A.replace('type = "u64"\nown = 8589934592', "own = 5"))
    d = diagnostic(rejected(plan, comp), "L-FACT-TYPE")
    assert_mentions(d, "kernel kf", "'u32'", "'u64'", line_of(comp.file, "[fact.big]"),
                    line_of(reader.contract.file, "[fact.big]"))


def test_kernel_cannot_own_its_cluster_facts(packer, reader):
    d = diagnostic(rejected(plan, _kernel(packer, [reader], MODEL_A + "\n[fact.cluster_x]\nown = 2\n")), "L-FACT-OWNERS")
    assert_mentions(d, "cluster shape")


@pytest.mark.parametrize("facts, needle", [
    ("[fact.x]\naccept = [1]\n", "`own` is required"),
    ('[fact.x]\ntype = "i32"\nown = 2147483648\n', "must be in -2147483648..2147483647"),
    ('[fact.x]\ntype = "f32"\nown = 1\n', "unknown fact type"),
    ("[fact.x]\nown = 1\nwhat = 2\n", "not a known field"),
])
def test_kernel_fact_schema(packer, reader, facts, needle):
    d = diagnostic(rejected(_kernel, packer, [reader], MODEL_A + "\n" + facts), "C-SCHEMA")
    assert_mentions(d, needle)
