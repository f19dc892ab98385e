"""`[component] co_resident = true`: a component that waits for other CTAs of the grid needs a
grid bounded by resident_ctas (L-RESIDENT at link time) and no more CTAs than fit at launch
(R-GRID, from the runtime's grid evaluation; no GPU needed)."""

from __future__ import annotations

import pytest

from conftest import TOY, diagnostic, line_of, rejected
from pipelink.linker.contract import parse_contract_text
from pipelink.common.diagnostics import CODES, Rejected
from pipelink.linker.link import plan
from pipelink.runtime import LaunchError, Manifest, grid_dims


@pytest.fixture(scope="module")
def waiting_consumer(packer, toy):
    """The toy's consumer, declared co_resident (the object is the same: it is a declaration)."""
    text = toy.contract_text("consumer").replace("[component]\n", "[component]\nco_resident = true\n", 1)
    assert "co_resident = true" in text
    return packer.pack(text, [toy.objects["consumer"]])


def _kernel(grid: str) -> str:
    return (TOY / "toy.kernel.toml").read_text().replace('grid = ["blocks", 1, 1]', f"grid = [{grid}, 1, 1]")


def test_contract_reads_co_resident():
    base = (TOY / "consumer.contract.toml").read_text()
    assert parse_contract_text(base, "c.toml").co_resident is False
    assert parse_contract_text(base.replace("[component]\n", "[component]\nco_resident = true\n", 1), "c.toml").co_resident
    with pytest.raises(Rejected) as e:
        parse_contract_text(base.replace("[component]\n", '[component]\nco_resident = "yes"\n', 1), "c.toml")
    assert e.value.codes == ["C-SCHEMA"]


def test_unbounded_grid_is_l_resident(packer, toy, waiting_consumer):
    kfile = packer.kernel_file(_kernel('"blocks"'), "unbounded")
    comp = packer.compose(kfile.read_text(), [toy.producer, waiting_consumer, toy.sink], name="unbounded")
    d = diagnostic(rejected(plan, comp), "L-RESIDENT")
    assert d.clause == "kernel.grid" and "resident_ctas" in d.hint
    assert any("co_resident = true" in f.text for f in d.facts)
    assert d.facts[0].origin.endswith(f":{line_of(kfile, 'grid =').rsplit(':', 1)[1]}")
    assert "L-RESIDENT" in CODES


def test_bounded_grid_links_and_the_plain_toy_needs_no_bound(packer, toy, waiting_consumer):
    comp = packer.compose(_kernel('"min(resident_ctas, blocks)"'), [toy.producer, waiting_consumer, toy.sink],
                          name="bounded")
    plan(comp)  # accepted
    # The toy as shipped (no co_resident component) needs no bound.
    plan(packer.compose(_kernel('"blocks"'), toy.packages, name="plain"))


def _manifest(co_resident) -> Manifest:
    d = {"kernel": "k", "grid": ["blocks", "1", "1"], "block": [128, 1, 1], "params": {"size": 0},
         **({"co_resident": co_resident} if co_resident else {})}
    return Manifest.from_dict(d)


def test_runtime_refuses_more_ctas_than_fit():
    m = _manifest(["cons"])
    assert m.co_resident == ("cons",)
    assert grid_dims(m, {"blocks": 132, "resident_ctas": 132}) == (132, 1, 1)
    with pytest.raises(LaunchError) as e:
        grid_dims(m, {"blocks": 133, "resident_ctas": 132})
    assert e.value.code == "R-GRID" and "cons" in str(e.value) and "resident_ctas" in e.value.hint
    with pytest.raises(LaunchError) as e:
        grid_dims(m, {"resident_ctas": 132}, grid=(200, 1, 1))  # an explicit grid is checked too
    assert e.value.code == "R-GRID"
    assert grid_dims(_manifest(None), {"blocks": 500, "resident_ctas": 132}) == (500, 1, 1)
