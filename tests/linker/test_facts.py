"""Facts travel from their one owner to every reader at link time, without recompiling readers.

The toy consumer owns `tile` (PL_OWN_FACT(tile, TOY_TILE)); the producer reads it through a
handle. Rebuilding only the consumer with -DTOY_TILE=128 (and its contract's own = 128) must
change the linked kernel while the producer's package stays byte-for-byte the same.
"""

from __future__ import annotations

import hashlib
import re

import pytest

from conftest import TOY, LtoCompiler, assert_mentions, diagnostic, line_of, rejected
from pipelink.linker.compose import parse_kernel
from pipelink.linker.link import link, plan
from pipelink.linker.package_io import read_package
from pipelink.linker.sass import compare, disassemble


@pytest.fixture(scope="module")
def tile128(lto, packer, toy):
    """The consumer alone rebuilt with tile = 128: object, contract and package."""
    obj = lto(TOY / "consumer.cu", defines=["TOY_TILE=128"])
    text = toy.contract_text("consumer").replace("own = 256", "own = 128")
    return packer.pack(text, [obj], sources=toy.sources("consumer"), copts=LtoCompiler.copts(["TOY_TILE=128"]))


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def test_owner_change_reaches_readers_without_recompiling_them(lto, packer, toy, toy_linked, tile128):
    prod_file = packer.save(toy.producer)
    sink_file = packer.save(toy.sink)
    before = {p: _sha(p.read_bytes()) for p in (prod_file, sink_file)}
    compiled_before = list(lto.compiled)

    # Relink with the new owner and the *same package files* for the readers.
    readers = [read_package(str(prod_file)), read_package(str(sink_file))]
    res = link(parse_kernel(str(toy.kernel), [readers[0], tile128, readers[1]]), control=True)

    assert {p: _sha(p.read_bytes()) for p in (prod_file, sink_file)} == before  # readers untouched
    assert not [c for c in lto.compiled[len(compiled_before):] if c[0] != "consumer.cu"]  # nothing else rebuilt
    assert readers[0].objects == toy.producer.objects
    assert res.manifest["facts"] == {"tile": 128} and toy_linked.manifest["facts"] == {"tile": 256}
    assert res.cubin != toy_linked.cubin
    # The producer's handle for the fact now returns the owner's new value ...
    assert re.search(r'pl_producer__fact__tile\(unsigned i\) \{ return 128u; \}', res.source)
    assert re.search(r'pl_producer__fact__tile\(unsigned i\) \{ return 256u; \}', toy_linked.source)
    # ... and so does everything computed from it: the ring's stages are tile * 4 bytes.
    assert res.report["rings"]["work"]["stage_bytes"] == 512
    assert toy_linked.report["rings"]["work"]["stage_bytes"] == 1024
    # The relinked kernel is still exactly what one translation unit compiles to.
    cmp = compare(res.cubin, res.control_cubin, "toy")
    assert cmp["identical"], "\n".join(cmp["functions"]["toy"]["diff"][:60])
    # LTO folded the new value into the producer's code: its loop bound is an immediate.
    sass_new = "\n".join(disassemble(res.cubin)["toy"])
    assert "CALL" not in sass_new


def test_reader_that_cannot_accept_the_new_value(packer, toy, tile128):
    prod = packer.variant(toy.producer, toy.producer.contract_text.replace(
        "accept = { min = 32, max = 4096, multiple_of = 32 }", "accept = { min = 256, max = 4096, multiple_of = 256 }"))
    comp = parse_kernel(str(toy.kernel), [prod, tile128, toy.sink])
    d = diagnostic(rejected(plan, comp), "L-FACT-ACCEPT")
    assert d.clause == "fact.tile"
    assert_mentions(d, "cons (consumer)", "own = 128", line_of(tile128.contract.file, "own = 128"),
                    "prod (producer)", "multiple_of = 256", line_of(prod.contract.file, "multiple_of = 256"))
    # With the original owner (tile = 256) the same reader is fine.
    ch, pl, src, _ = plan(parse_kernel(str(toy.kernel), [prod, toy.consumer, toy.sink]))
    assert ch.facts == {"tile": 256}


def test_reader_pinned_to_a_list(packer, toy, tile128):
    prod = packer.variant(toy.producer, toy.producer.contract_text.replace(
        "accept = { min = 32, max = 4096, multiple_of = 32 }", "accept = [256, 512]"))
    d = diagnostic(rejected(plan, parse_kernel(str(toy.kernel), [prod, tile128, toy.sink])), "L-FACT-ACCEPT")
    assert_mentions(d, "accept = [256, 512]", "own = 128")


def test_fact_feeds_other_readers_expressions(packer, toy, tile128):
    """Every expression over the fact is re-evaluated at link time with the owner's value."""
    ch_old, _, _, _ = plan(parse_kernel(str(toy.kernel), toy.packages))
    ch_new, pl_new, _, _ = plan(parse_kernel(str(toy.kernel), [toy.producer, tile128, toy.sink]))
    assert [r.stage_bytes for r in ch_old.rings] == [1024] and [r.stage_bytes for r in ch_new.rings] == [512]
    assert pl_new.sizes["ring.work.buffer"] == 512 * pl_new.depths["work"]
