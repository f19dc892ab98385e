"""Limits pass (limits.py): a contract whose sizes or counts can exceed the architecture's hard
limits is refused when packed (P-LIMIT), naming the limit and the fact values that break it.

`[ring.ab] stage_bytes = "block_m * 1000000000000"` used to pack without complaint."""

from __future__ import annotations

import pytest

from pipelink.linker import cli
from pipelink.linker.contract import parse_contract_text
from pipelink.common.diagnostics import Rejected
from pipelink.linker.limits import check_limits, fact_corners, largest

HEAD = """[component]
name = "c"
entry = "run"
arch = "sm_90a"
[role]
warps = 4
"""


def refused(text: str, arch: str = "sm_90a") -> list:
    c = parse_contract_text(HEAD.replace("sm_90a", arch) + text, "c.contract.toml")
    with pytest.raises(Rejected) as e:
        check_limits(c)
    assert set(e.value.codes) == {"P-LIMIT"}
    return e.value.diagnostics


def passes(text: str) -> None:
    check_limits(parse_contract_text(HEAD + text, "c.contract.toml"))


def test_stage_bytes_over_facts_at_their_greatest_accepted_value():
    (d,) = refused('[fact.block_m]\naccept = [64, 128]\n'
                   '[ring.ab]\nside = "producer"\nstage_bytes = "block_m * 1000000000000"\ndepth = [2, 4]\narrivals = 1\n')
    assert d.clause == "ring.ab.stage_bytes" and "232,448" in d.message and "shared memory" in d.message
    assert "block_m = 128" in d.facts[0].text and "depth min 2" in d.facts[0].text
    assert d.facts[0].origin == "c.contract.toml:9" and "accept" in d.hint


def test_fits_at_every_accepted_value_passes():
    passes('[fact.block_m]\naccept = {min = 64, max = 128, multiple_of = 64}\n'
           '[ring.ab]\nside = "producer"\nstage_bytes = "block_m * 512"\ndepth = [2, 4]\narrivals = 1\n')


def test_accept_range_upper_bound_and_unbounded_reader():
    (d,) = refused('[fact.n]\naccept = {max = 1024}\n[smem.x]\nbytes = "n * 4096"\n')
    assert "n = 1024" in d.facts[0].text and "4,194,304" in d.message
    (d,) = refused('[fact.n]\n[smem.x]\nbytes = "n * 2"\n')  # reads any u32
    assert f"n = {2**32 - 1}" in d.facts[0].text


def test_literal_sizes_and_arch_capacity():
    passes('[smem.x]\nbytes = 232448\n')
    refused('[smem.x]\nbytes = 232449\n')
    (d,) = refused('[smem.x]\nbytes = 150000\n', arch="sm_120a")
    assert "sm_120a" in d.message and "101,376" in d.message


def test_counts_barriers_registers_arrivals_tiles():
    bars = "".join(f"[barrier.b{i}]\nthreads = \"role\"\n" for i in range(16))
    (d,) = refused(bars)
    assert "16 named barriers" in d.message and len(d.facts) == 16
    (d,) = refused('[barrier.big]\nthreads = 2048\n')
    assert "1,024" in d.message
    c = parse_contract_text(HEAD.replace("warps = 4", "warps = 32\nregs = [128, 256]"), "c.contract.toml")
    with pytest.raises(Rejected) as e:
        check_limits(c)
    assert e.value.codes == ["P-LIMIT"] and "131,072" in e.value.diagnostics[0].message
    (d,) = refused('[fact.w]\naccept = [1, 4096]\n'
                   '[ring.r]\nside = "consumer"\nstage_bytes = 128\ndepth = 2\narrivals = "w * 1024"\n')
    assert "mbarrier" in d.message and "w = 4096" in d.facts[0].text
    (d,) = refused('[export.acc]\nshape = [128, 256]\ndtype = "f32"\nlayout = "blocked"\nscope = "warp"\n')
    assert "registers of a thread" in d.message and "1,024" in d.message  # 128*256 f32 over 32 threads
    passes('[export.acc]\nshape = [64, 256]\ndtype = "f32"\nlayout = "blocked"\nscope = "warpgroup"\n')


def test_corners():
    c = parse_contract_text(HEAD + '[fact.a]\nown = 7\n[fact.b]\naccept = {min = 3, max = 17, multiple_of = 4}\n'
                            '[smem.x]\nbytes = "a * b"\n', "c.contract.toml")
    assert [fact_corners(f) for f in c.facts] == [[7], [4, 16]]
    assert largest(c, "a * b") == (112, {"a": 7, "b": 16})


def test_pack_cli_refuses_before_reading_objects(tmp_path, capsys):
    contract = tmp_path / "c.contract.toml"
    contract.write_text(HEAD + '[fact.block_m]\naccept = [64]\n[ring.ab]\nside = "producer"\n'
                        'stage_bytes = "block_m * 1000000000000"\ndepth = [2, 4]\narrivals = 1\n')
    rc = cli.main(["pack", "--contract", str(contract), "--object", str(tmp_path / "missing.o"),
                   "--out", str(tmp_path / "c.plpkg")])
    err = capsys.readouterr().err
    assert rc == 1 and "error P-LIMIT" in err and "hint:" in err and "Traceback" not in err


def test_grid_extent_fixed_by_facts_is_held_to_cuda_limits(packer, toy):
    """`grid = [1, "tile * 1000", 1]` names only a fact: fixed at link time, 256,000 > 65,535 (y)."""
    from conftest import kernel_text
    from pipelink.linker.check import check

    def codes(grid):
        text = kernel_text("g", ("prod", "producer"), ("cons", "consumer"), ("out", "sink")).replace(
            "grid = [1, 1, 1]", f"grid = {grid}")
        try:
            check(packer.compose(text, toy.packages, name="g"))
        except Rejected as e:
            return e.diagnostics
        return []

    (d,) = codes('[1, "tile * 1000", 1]')
    assert d.code == "L-GRID" and "256,000" in d.message and "tile = 256" in d.message and "65,535" in d.message
    assert codes('["tile * 1000", 1, 1]') == []  # x reaches 2^31-1
    assert codes('[1, "tiles * tile", 1]') == []  # a parameter: some launch fits (the runtime checks it)
    (d,) = codes('[1, "tiles * tile * 1000", 1]')  # ... unless none can
    assert d.code == "L-GRID"
