"""Link: the toy kernel links with nvJitLink, its manifest says how to launch it, and its
normalized SASS equals the single-translation-unit control's (the CI guard). Also a staged
register transfer (blocked -> cyclic) and a callable import/export link and match their controls.
All of this runs on the CPU (tests/runtime/test_runtime.py runs the toy on a GPU)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import ROOT, kernel_text
from pipelink.linker.compose import parse_kernel
from pipelink.linker.link import link, write_outputs
from pipelink.linker.sass import compare, disassemble


def assert_same_sass(res, kernel: str):
    cmp = compare(res.cubin, res.control_cubin, kernel)
    f = cmp["functions"][kernel]
    assert cmp["identical"], "linked SASS differs from the control:\n" + "\n".join(f["diff"][:80])
    assert f["linked_instructions"] > 10


# ---- the toy ----------------------------------------------------------------------------------------

def test_toy_sass_equals_control(toy_linked):
    """CI guard: the separately compiled, contract-linked toy is the same machine code as the
    toy compiled as one translation unit."""
    assert_same_sass(toy_linked, "toy")


def test_toy_handles_are_folded(toy_linked):
    sass = disassemble(toy_linked.cubin)["toy"]
    assert not any(i.startswith("CALL") for i in sass)  # every handle inlined
    assert not any(re.match(r"(LDL|STL)\b", i) for i in sass)  # no spills
    assert any(i.startswith("SYNCS") or "BAR" in i for i in sass)  # the ring's mbarriers / named barrier


def test_toy_manifest(toy_linked):
    m = toy_linked.manifest
    assert m["format"] == 1 and m["kernel"] == m["entry"] == "toy" and m["arch"] == "sm_90a"
    assert m["block"] == [256, 1, 1]  # prod in warp group 0, cons (aligned) in group 1
    assert m["grid"] == ["blocks", "1", "1"] and m["cluster"] == [1, 1, 1]
    assert m["dynamic_smem"] == toy_linked.placement.dynamic_smem == 8288
    assert m["static_smem"] == 0 and 0 < m["registers"] <= 255
    assert m["facts"] == {"tile": 256}
    params = m["params"]
    assert params["by_name"] == {"in": "ptr", "out": "ptr", "tiles": "u32"}
    # struct PlKernelParams { prod {in, out, tiles}; cons {...}; out {...}; } with natural alignment
    assert [(f["instance"], f["name"], f["offset"]) for f in params["fields"]] == [
        ("prod", "in", 0), ("prod", "out", 8), ("prod", "tiles", 16),
        ("cons", "in", 24), ("cons", "out", 32), ("cons", "tiles", 40),
        ("out", "in", 48), ("out", "out", 56), ("out", "tiles", 64)]
    assert params["size"] == 72
    assert [i["name"] for i in m["instances"]] == ["prod", "cons", "out"]
    assert all(re.fullmatch(r"[0-9a-f]{16}", i["package_digest"]) for i in m["instances"])
    json.dumps(m)  # JSON-serialisable as written


def test_toy_report_and_map_record_the_solved_placement(toy_linked):
    r = toy_linked.report
    assert r["solver"]["proven_optimal"] is True
    assert r["rings"]["work"] == {"depth": 6, "range": [2, 6], "stage_bytes": 1024, "producer": "prod", "consumer": "cons"}
    assert r["barriers"] == {"cons.combine": 1}
    assert r["roles"]["prod"]["warps"] == [0, 0] and r["roles"]["cons"]["warps"] == [4, 7]
    assert r["transfers"] == [{"export": "cons.acc", "import": "out.acc", "kind": "direct"}]
    assert r["resource_usage"]["LOCAL"] == 0
    assert "solver proven optimal" in toy_linked.map_text and "cons.smem.scratch" in toy_linked.map_text


def test_write_outputs_all_or_nothing(tmp_path, toy_linked):
    out = {"cubin": tmp_path / "o" / "toy.cubin", "manifest": tmp_path / "o" / "toy.manifest.json",
           "report": tmp_path / "o" / "toy.report.json", "map_path": tmp_path / "o" / "toy.map.txt",
           "control": tmp_path / "o" / "toy.control.cubin", "source": tmp_path / "o" / "toy.pipelink.cu"}
    write_outputs(toy_linked, **{k: str(v) for k, v in out.items()})
    assert out["cubin"].read_bytes() == toy_linked.cubin
    assert json.loads(out["manifest"].read_text()) == toy_linked.manifest
    assert "timings_s" not in json.loads(out["report"].read_text())  # reports are bit-stable
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == sorted(p.name for p in out.values())


def test_cli_link_writes_outputs(tmp_path, toy, packer):
    pkgs = [str(packer.save(p)) for p in toy.packages]
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "pipelink", "--format=json", "link", "--kernel", str(toy.kernel),
           *[a for p in pkgs for a in ("--package", p)], "--out-dir", str(out),
           "--control-cubin", str(out / "toy.control.cubin")]
    r = subprocess.run(cmd, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "tools"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and doc["report"]["solver"]["proven_optimal"] is True
    assert sorted(p.name for p in out.iterdir()) == ["toy.control.cubin", "toy.cubin", "toy.manifest.json",
                                                     "toy.map.txt", "toy.report.json"]
    sd = subprocess.run([sys.executable, "-m", "pipelink", "sass-diff", str(out / "toy.cubin"),
                         str(out / "toy.control.cubin"), "--kernel", "toy"], capture_output=True, text=True,
                        env={"PYTHONPATH": str(ROOT / "tools"), "PATH": "/usr/bin:/bin"})
    assert sd.returncode == 0 and "toy: identical" in sd.stdout


# ---- a staged transfer: the consumer exports `blocked`, the sink imports `cyclic` ------------------

@pytest.fixture(scope="module")
def staged(packer, toy):
    sink = packer.variant(toy.sink, toy.sink.contract_text.replace('layout = "blocked"', 'layout = "cyclic"'))
    return link(parse_kernel(str(toy.kernel), [toy.producer, toy.consumer, sink]), control=True)


def test_staged_transfer_links_and_matches_control(staged):
    (t,) = staged.checked.transfers
    assert t.kind == "staged" and t.export.layout == "blocked" and t.imp.layout == "cyclic"
    assert staged.report["transfers"] == [{"export": "cons.acc", "import": "out.acc", "kind": "staged"}]
    # A warp-scoped tile is staged per warp: 4 warps x 32 x 4 floats.
    assert staged.placement.sizes["transfer.cons.acc"] == 4 * 32 * 4 * 4
    assert "staged transfer blocked -> cyclic of [32, 4] f32" in staged.source
    assert "__syncwarp();" in staged.source
    assert_same_sass(staged, "toy")


def test_role_scoped_staged_transfer_gets_a_barrier(packer, toy):
    """A role-scoped tile synchronises through a solver-placed named barrier."""
    from pipelink.linker.link import plan

    cons = packer.variant(toy.consumer, toy.consumer.contract_text.replace('scope = "warp"', 'scope = "role"'))
    sink = packer.variant(toy.sink, toy.sink.contract_text.replace('layout = "blocked"', 'layout = "cyclic"')
                          .replace('scope = "warp"', 'scope = "role"'))
    ch, pl, src, _ = plan(parse_kernel(str(toy.kernel), [toy.producer, cons, sink]))
    bar = pl.barrier_ids["transfer.cons.acc"]
    assert bar != pl.barrier_ids["cons.combine"] and 1 <= bar <= 15
    assert f"pl::named_barrier_sync({bar}u, 128u);" in src
    assert pl.sizes["transfer.cons.acc"] == 32 * 4 * 4


# ---- a callable import/export --------------------------------------------------------------------

@pytest.fixture(scope="module")
def called(packer, component):
    pkgs = [component("caller"), component("callee")]
    return link(packer.compose(kernel_text("calls", ("c", "caller"), ("lib", "callee")), pkgs), control=True)


def test_callable_is_bound_inlined_and_sass_equals_control(called):
    (cb,) = called.checked.calls
    assert (cb.importer.name, cb.exporter.name, cb.imp.signature) == ("c", "lib", "void(float*,unsigned)")
    assert "pl_caller__call__scale(unsigned i, float* a0, unsigned a1)" in called.source
    assert "pl_callee__callable__scale(0u, a0, a1);" in called.source
    sass = disassemble(called.cubin)["calls"]
    assert not any(i.startswith("CALL") for i in sass)  # the thunk and the callable were inlined
    assert any(i.startswith("FMUL") or i.startswith("FADD") for i in sass)  # x[i] *= 2
    assert_same_sass(called, "calls")


def test_a_library_called_through_callables_runs_in_its_callers_warps(packer, component):
    """A library that reads PL_WARP_BEGIN() and is reached only through its callables (the
    decode megakernel's dec_rmsnorm, dec_matvec, ...) gets the warp range of the one role that
    imports them; called by two roles it has none (L-ROLE naming both)."""
    import dataclasses

    from pipelink.common.diagnostics import Rejected
    from pipelink.linker.link import plan

    callee = component("callee")
    m = callee.measured
    lib = dataclasses.replace(callee, measured=dataclasses.replace(
        m, handles=tuple(sorted(set(m.handles) | {"pl_callee__role__warp_begin"}))))
    one = packer.compose(kernel_text("calls", ("c0", "caller"), ("lib", "callee")), [component("caller"), lib])
    ch, pl, src, _ = plan(one)
    body = src[src.index("pl_callee__role__warp_begin(unsigned"):]
    assert f"return {pl.warp_begin['c0']}u;" in body[:body.index("}")]
    two = packer.compose(kernel_text("calls2", ("c0", "caller"), ("c1", "caller"), ("lib", "callee")),
                         [component("caller"), lib])
    with pytest.raises(Rejected) as e:
        plan(two)
    (d,) = [x for x in e.value.diagnostics if x.code == "L-ROLE"]
    assert "called by 2 roles" in d.message and {f.text for f in d.facts if f.side == "caller"} == {"c0", "c1"}
