"""Pack pass: a real LTO-IR object + its contract -> a measured, verified, deterministic package."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from conftest import COMPONENTS, TOY, LtoCompiler, assert_mentions, diagnostic, line_of, rejected
from pipelink.linker.package import FORMAT, pack
from pipelink.linker.package_io import read_package, write_package

MEAS = COMPONENTS / "meas.contract.toml"
MEAS_TEXT = MEAS.read_text()


@pytest.fixture(scope="module")
def meas_obj(lto):
    return lto(COMPONENTS / "meas.cu")


@pytest.fixture(scope="module")
def meas(packer, meas_obj):
    return packer.pack(MEAS, [meas_obj], sources=[COMPONENTS / "meas.cu"])


def _pack_text(packer, text, obj):
    """Pack `text` for real (uncached: a rejection must come from pack itself)."""
    path = packer.contract_file(text, "meas")
    return path, (lambda: pack(str(path), [str(obj)]))


def test_pack_measures_the_object(meas):
    m = meas.measured
    assert set(m.handles) == {"pl_meas__fact__lanes", "pl_meas__smem__stage", "pl_meas__bar__sync",
                              "pl_meas__role__warp_begin", "pl_meas__role__warps"}
    assert m.own_facts == {"pl_meas__own__width": 64}
    assert m.static_smem == 512  # __shared__ float fixed[128]
    assert 0 < m.regs["pl_meas__entry__run"] <= 255
    assert m.toolkit.startswith("13.")
    assert meas.contract.name == "meas" and meas.sources  # carried for the control build


def test_pack_toy(toy):
    assert set(toy.producer.measured.handles) == {
        "pl_producer__fact__tile", "pl_producer__ring_depth__work", "pl_producer__ring_buffer__work",
        "pl_producer__ring_full__work", "pl_producer__ring_empty__work"}
    assert toy.consumer.measured.own_facts == {"pl_consumer__own__tile": 256}
    assert "pl_consumer__export__acc" in toy.consumer.measured.handles
    assert toy.sink.measured.handles == ()  # a library that only defines its import
    assert "pl_sink__import__acc" in toy.sink.measured.regs


def test_undeclared_handle(packer, meas_obj):
    # The object syncs on barrier `sync`; this contract has no [barrier.sync].
    text = MEAS_TEXT.replace('[barrier.sync]\nthreads = "role"\n', "")
    path, run = _pack_text(packer, text, meas_obj)
    d = diagnostic(rejected(run), "P-UNDECLARED")
    assert d.clause == "barrier.sync"
    assert_mentions(d, "pl_meas__bar__sync", f"{path}:2", "meas.o")


def test_undeclared_owned_fact(packer, meas_obj):
    text = MEAS_TEXT.replace('[fact.width]\ntype = "u32"\nown = 64\n', "").replace('"width * 8"', "512")
    path, run = _pack_text(packer, text, meas_obj)
    d = diagnostic(rejected(run), "P-UNDECLARED")
    assert d.clause == "fact.width"
    assert_mentions(d, "PL_OWN_FACT(width, 64)", str(path))


def test_unused_clause(packer, meas_obj):
    text = MEAS_TEXT + '\n[smem.spare]\nbytes = 64\n'
    path, run = _pack_text(packer, text, meas_obj)
    rej = rejected(run)
    assert rej.codes == ["P-UNUSED"]
    d = rej.diagnostics[0]
    assert d.clause == "smem.spare"
    assert_mentions(d, line_of(path, "[smem.spare]"), "pl_meas__smem__spare", "meas.o")


def test_unused_ring_and_read_fact(packer, meas_obj):
    text = MEAS_TEXT + ('\n[fact.extra]\naccept = [1]\n\n[ring.q]\nside = "producer"\nstage_bytes = 64\n'
                        'depth = 2\narrivals = 1\n')
    path, run = _pack_text(packer, text, meas_obj)
    rej = rejected(run)
    assert sorted(d.clause for d in rej.diagnostics if d.code == "P-UNUSED") == ["fact.extra", "ring.q"]
    ring = next(d for d in rej.diagnostics if d.clause == "ring.q")
    assert_mentions(ring, line_of(path, "[ring.q]"))


def test_entry_not_defined(packer, meas_obj):
    text = MEAS_TEXT.replace('entry = "run"', 'entry = "start"')
    path, run = _pack_text(packer, text, meas_obj)
    d = diagnostic(rejected(run), "P-ENTRY")
    assert d.clause == "component.entry"
    assert_mentions(d, "pl_meas__entry__start", f"{path}:2")


def test_callable_export_not_defined(packer, lto):
    obj = lto(COMPONENTS / "callee.cu")
    text = (COMPONENTS / "callee.contract.toml").read_text() + '\n[callable.export.shift]\nsignature = "void(unsigned)"\n'
    path = packer.contract_file(text, "callee")
    d = diagnostic(rejected(pack, str(path), [str(obj)]), "P-ENTRY")
    assert d.clause == "callable.export.shift"


def test_fact_value_differs(packer, lto):
    obj = lto(COMPONENTS / "meas.cu", defines=["MEAS_WIDTH=128"])
    path, run = _pack_text(packer, MEAS_TEXT, obj)  # contract: own = 64
    d = diagnostic(rejected(run), "P-FACT-VALUE")
    assert d.clause == "fact.width"
    assert "64" in d.message and "128" in d.message
    assert_mentions(d, line_of(path, "[fact.width]"), "PL_OWN_FACT(width, 128)")


def test_fact_value_matches_when_both_change(packer, lto):
    obj = lto(COMPONENTS / "meas.cu", defines=["MEAS_WIDTH=128"])
    pkg = packer.pack(MEAS_TEXT.replace("own = 64", "own = 128"), [obj])
    assert pkg.measured.own_facts == {"pl_meas__own__width": 128}


def test_owned_fact_zero(packer, lto):
    """A zero-valued owned fact has no initializer in PTX; pack still finds it."""
    obj = lto(COMPONENTS / "meas.cu", defines=["MEAS_WIDTH=0"])
    pkg = packer.pack(MEAS_TEXT.replace("own = 64", "own = 0"), [obj])
    assert pkg.measured.own_facts == {"pl_meas__own__width": 0}
    d = diagnostic(rejected(_pack_text(packer, MEAS_TEXT, obj)[1]), "P-FACT-VALUE")  # contract: own = 64
    assert "64" in d.message and " 0 " in d.message + " "


@pytest.mark.parametrize("width", [2**31, 2**32 - 1])
def test_owned_fact_at_or_past_2_31(packer, lto, width):
    """PTX prints a u32 of 2^31 or more as a negative number (`= -1`); pack reads it as the u32
    it is, instead of "owned fact width is not in the object"."""
    obj = lto(COMPONENTS / "meas.cu", defines=[f"MEAS_WIDTH={width}u"])
    # stage's size leaves `width`: width * 8 bytes of shared memory is past every arch's limit (P-LIMIT).
    text = MEAS_TEXT.replace("own = 64", f"own = {width}").replace('bytes = "width * 8"', "bytes = 512")
    pkg = packer.pack(text, [obj])
    assert pkg.measured.own_facts == {"pl_meas__own__width": width}
    d = diagnostic(rejected(_pack_text(packer, MEAS_TEXT, obj)[1]), "P-FACT-VALUE")  # contract: own = 64
    assert str(width) in d.message and "not in the object" not in d.message


def test_wrong_arch(packer, lto):
    """An object compiled for lto_100a packed with a contract for sm_90a.

    nvJitLink itself only says "ERROR 3: bad input: <object>"; pack reads the object's fatbin
    listing to name the architecture it was compiled for."""
    obj = lto(COMPONENTS / "meas.cu", arch="sm_100a")
    path, run = _pack_text(packer, MEAS_TEXT, obj)
    rej = rejected(run)
    assert rej.codes == ["P-ARCH"]
    d = rej.diagnostics[0]
    assert d.clause == "component.arch"
    assert_mentions(d, "sm_90a", "compiled for sm_100a", f"{path}:2", "bad input")


def test_arch_in_contract_matches_object(packer, lto):
    obj = lto(COMPONENTS / "meas.cu", arch="sm_100a")
    pkg = packer.pack(MEAS_TEXT.replace('arch = "sm_90a"', 'arch = "sm_100a"'), [obj])
    assert pkg.contract.arch == "sm_100a" and pkg.measured.static_smem == 512


def test_missing_files(tmp_path, meas_obj):
    d = diagnostic(rejected(pack, str(MEAS), [str(tmp_path / "nope.o")]), "E-FILE")
    assert "nope.o" in d.message
    d = diagnostic(rejected(pack, str(tmp_path / "nope.contract.toml"), [str(meas_obj)]), "E-FILE")
    assert "nope.contract.toml" in d.message
    d = diagnostic(rejected(pack, str(MEAS), [str(meas_obj)], sources=[str(tmp_path / "gone.cu")]), "E-FILE")
    assert "gone.cu" in d.message
    assert rejected(read_package, str(tmp_path / "nope.plpkg")).codes == ["E-FILE"]


def test_not_an_object(tmp_path):
    junk = tmp_path / "junk.o"
    junk.write_bytes(b"\x7fELF not really")
    rej = rejected(pack, str(MEAS), [str(junk)])
    assert rej.codes in (["P-COMPILE"], ["P-ARCH"])
    assert "junk.o" in rej.diagnostics[0].render()


def test_package_bytes_are_deterministic(tmp_path, packer, meas_obj):
    a = pack(str(MEAS), [str(meas_obj)], sources=[str(COMPONENTS / "meas.cu")], copts=["-DX=1"])
    b = pack(str(MEAS), [str(meas_obj)], sources=[str(COMPONENTS / "meas.cu")], copts=["-DX=1"])
    write_package(a, str(tmp_path / "a.plpkg"))
    write_package(b, str(tmp_path / "b" / "b.plpkg"))
    assert (tmp_path / "a.plpkg").read_bytes() == (tmp_path / "b" / "b.plpkg").read_bytes()
    assert a.digest() == b.digest()
    assert not list(tmp_path.rglob("*.tmp"))  # written through a temporary, renamed into place


def test_package_round_trip(tmp_path, meas):
    out = tmp_path / "meas.plpkg"
    write_package(meas, str(out))
    back = read_package(str(out))
    assert back.contract == meas.contract
    assert back.measured == meas.measured
    assert back.objects == meas.objects and back.sources == meas.sources
    assert back.digest() == meas.digest()
    z = zipfile.ZipFile(out)
    names = z.namelist()
    assert names == sorted(names) and "pipelink-package.json" in names and "contract.toml" in names
    assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in z.infolist())
    manifest = json.loads(z.read("pipelink-package.json"))
    assert manifest["format"] == FORMAT and manifest["measured"]["static_smem"] == 512
    # Writing what was read gives the same bytes again.
    write_package(back, str(tmp_path / "again.plpkg"))
    assert (tmp_path / "again.plpkg").read_bytes() == out.read_bytes()


def _zip(entries: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for k, v in entries.items():
            z.writestr(k, v)
    return buf.getvalue()


def _damaged(good: bytes) -> dict[str, bytes]:
    z = zipfile.ZipFile(io.BytesIO(good))
    entries = {n: z.read(n) for n in z.namelist()}
    manifest = json.loads(entries["pipelink-package.json"])
    obj = next(n for n in entries if n.startswith("objects/"))
    return {
        "truncated": good[: len(good) // 2],
        "empty": b"",
        "text": b"not a zip file at all\n",
        "no-manifest": _zip({k: v for k, v in entries.items() if k != "pipelink-package.json"}),
        "no-contract": _zip({k: v for k, v in entries.items() if k != "contract.toml"}),
        "manifest-not-json": _zip(entries | {"pipelink-package.json": b"{not json"}),
        "manifest-a-list": _zip(entries | {"pipelink-package.json": b"[1, 2]"}),
        "format-2": _zip(entries | {"pipelink-package.json": json.dumps(manifest | {"format": 2}).encode()}),
        "missing-object": _zip({k: v for k, v in entries.items() if k != obj}),
        "manifest-missing-key": _zip(entries | {"pipelink-package.json": json.dumps(
            {k: v for k, v in manifest.items() if k != "measured"}).encode()}),
        "bad-contract": _zip(entries | {"contract.toml": b"[component\n"}),
        "contract-not-utf8": _zip(entries | {"contract.toml": b"\xff\xfe\x00"}),
    }


@pytest.fixture(scope="module")
def good_package_bytes(tmp_path_factory, meas):
    out = tmp_path_factory.mktemp("pkg") / "meas.plpkg"
    write_package(meas, str(out))
    return out.read_bytes()


@pytest.mark.parametrize("damage", [
    "truncated", "empty", "text", "no-manifest", "no-contract", "manifest-not-json", "manifest-a-list", "format-2",
    "missing-object", "manifest-missing-key", "bad-contract", "contract-not-utf8"])
def test_damaged_package_is_p_package(tmp_path, good_package_bytes, damage):
    path = tmp_path / f"{damage}.plpkg"
    path.write_bytes(_damaged(good_package_bytes)[damage])
    rej = rejected(read_package, str(path))
    assert rej.codes == ["P-PACKAGE"], rej
    assert str(path) in rej.diagnostics[0].render()


def test_pack_cli(tmp_path, meas_obj):
    """`pipelink pack` writes the package; on a bad contract it writes nothing and exits 1."""
    from pipelink.linker.cli import main

    out = tmp_path / "meas.plpkg"
    assert main(["--format=json", "pack", "--contract", str(MEAS), "--object", str(meas_obj), "--out", str(out)]) == 0
    assert read_package(str(out)).measured.static_smem == 512
    bad = tmp_path / "bad.contract.toml"
    bad.write_text(MEAS_TEXT.replace("own = 64", "own = 65"))
    out2 = tmp_path / "bad.plpkg"
    assert main(["pack", "--contract", str(bad), "--object", str(meas_obj), "--out", str(out2)]) == 1
    assert not out2.exists() and not list(tmp_path.glob("*.tmp"))


def test_copts_and_sources_are_carried(packer, lto):
    pkg = packer.pack(TOY / "consumer.contract.toml",
                      [lto(TOY / "consumer.cu")], sources=[TOY / "consumer.cu", TOY / "params.h"],
                      copts=LtoCompiler.copts(["TOY_TILE=256"]))
    assert pkg.copts == ("-DTOY_TILE=256",)
    assert sorted(p.rsplit("/", 1)[-1] for p in pkg.sources) == ["consumer.cu", "params.h"]
    assert all(not p.startswith("/") and ".." not in p.split("/") for p in pkg.sources)
