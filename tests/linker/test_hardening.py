"""Issue 11: bad input never crashes, never half-writes, is never silently accepted.

One test (or a parametrized family) per class of the issue: damaged packages, input files,
outputs, unbounded values, silent acceptance, messages, the control build, and the contracts
checked against the code (P-REBUILD, L-SASS, spills). The guard mode is in test_guard.py, the
seeded fuzz run in test_fuzz.py.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import COMPONENTS, TOY, diagnostic, kernel_text, line_of, rejected
from pipelink.linker import cli
from pipelink.linker.compose import parse_kernel_text
from pipelink.linker.contract import parse_contract_text
from pipelink.common.diagnostics import CODES, Rejected
from pipelink.linker.link import link, plan
from pipelink.linker.package_io import read_package

ROOT = Path(__file__).resolve().parents[2]

ROLE = '[component]\nname = "r"\nkind = "role"\nentry = "run"\n[role]\nwarps = 1\n'


def run_cli(capsys, *argv) -> tuple[int, list[dict]]:
    """Run the CLI in-process with --format=json: (exit code, diagnostics)."""
    rc = cli.main(["--format=json", *map(str, argv)])
    out = capsys.readouterr().out
    diags = json.loads(out)["diagnostics"] if rc and out.strip().startswith("{") else []
    for d in diags:
        assert d["code"] in CODES and d["code"] != "E-INTERNAL", d
    return rc, diags


def codes(diags) -> list[str]:
    return [d["code"] for d in diags]


# ---- damaged packages --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def good_pkg(tmp_path_factory, packer, toy) -> bytes:
    return packer.save(toy.consumer).read_bytes()


def rezip(data: bytes, *, manifest=None, contract=None, obj=None, forge=False, method=zipfile.ZIP_DEFLATED) -> bytes:
    """The package with edits; forge=True records the edited parts' digests, as a package
    built that way would have them, so the checks behind the digests are reached."""
    from pipelink.linker.package_io import package_digests

    src = zipfile.ZipFile(io.BytesIO(data))
    entries = {info.filename: src.read(info) for info in src.infolist()}
    m = json.loads(entries["pipelink-package.json"])
    if manifest:
        manifest(m)
    if contract:
        entries["contract.toml"] = contract(entries["contract.toml"].decode()).encode()
    if obj:
        entries = {k: obj(v) if k.startswith("objects/") else v for k, v in entries.items()}
    if forge:
        part = lambda kind: {k[len(kind) + 1:]: v for k, v in entries.items() if k.startswith(kind + "/")}  # noqa: E731
        m["digests"] = package_digests(m, entries["contract.toml"], part("objects"), part("sources"))
    entries["pipelink-package.json"] = json.dumps(m).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, body in entries.items():
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), body, compress_type=method)
    return buf.getvalue()


def patch_headers(data: bytes, *, method: int | None = None, flags: int | None = None) -> bytes:
    """Set the compression method / flag bits in every local and central header."""
    b = bytearray(data)
    for sig, off_flags in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        i = b.find(sig)
        while i >= 0:
            if flags is not None:
                b[i + off_flags:i + off_flags + 2] = (int.from_bytes(b[i + off_flags:i + off_flags + 2], "little") | flags).to_bytes(2, "little")
            if method is not None:
                b[i + off_flags + 2:i + off_flags + 4] = method.to_bytes(2, "little")
            i = b.find(sig, i + 4)
    return bytes(b)


def corrupt_deflate(data: bytes) -> bytes:
    z = zipfile.ZipFile(io.BytesIO(data))
    info = z.getinfo("contract.toml")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    b = bytearray(data)
    for k in range(start, start + min(info.compress_size, 24)):
        b[k] ^= 0x5A
    return bytes(b)


DAMAGE = {
    "unsupported-compression": lambda d: patch_headers(d, method=99),
    "encrypted-flag": lambda d: patch_headers(d, flags=1),
    "corrupt-deflate": corrupt_deflate,
    "arch-is-a-list": lambda d: rezip(d, manifest=lambda m: m.update(arch=["sm_90a"])),
    "handle-null": lambda d: rezip(d, manifest=lambda m: m["measured"]["handles"].append(None)),
    "handle-int": lambda d: rezip(d, manifest=lambda m: m["measured"]["handles"].append(7)),
    "handle-unknown-kind": lambda d: rezip(d, manifest=lambda m: m["measured"]["handles"].append("pl_consumer__tmem__x")),
    "handle-without-clause": lambda d: rezip(d, manifest=lambda m: m["measured"]["handles"].append("pl_consumer__smem__nope"),
                                             forge=True),
    "contract-edited": lambda d: rezip(d, contract=lambda t: t.replace('tiles = "u32"', 'tiles = "u64"')),
    "manifest-edited": lambda d: rezip(d, manifest=lambda m: m.update(copts=["-DX=1"])),
    "regs-is-a-string": lambda d: rezip(d, manifest=lambda m: m["measured"].update(regs="many")),
    "objects-escape": lambda d: rezip(d, manifest=lambda m: m.update(objects=["../x.o"])),
    "contract-pack-rejects": lambda d: rezip(d, contract=lambda t: t.replace("own = 256", "own = 128"), forge=True),
    "contract-entry-renamed": lambda d: rezip(d, contract=lambda t: t.replace('entry = "main"', 'entry = "other"'),
                                              forge=True),
    "contract-clause-removed": lambda d: rezip(d, contract=lambda t: t.replace("[barrier.combine]\nthreads = \"role\"\n", ""),
                                              forge=True),
    "object-damaged": lambda d: rezip(d, obj=lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:]),
    "truncated": lambda d: d[: len(d) // 2],
    "empty": lambda d: b"",
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_package_is_p_package(tmp_path, capsys, good_pkg, damage):
    bad = DAMAGE[damage](good_pkg)
    assert bad != good_pkg
    p = tmp_path / "consumer.plpkg"
    p.write_bytes(bad)
    e = rejected(read_package, str(p))
    assert e.codes == ["P-PACKAGE"], e
    assert all(d.hint for d in e.diagnostics)
    rc, diags = run_cli(capsys, "plan", "--kernel", TOY / "toy.kernel.toml", "--package", p)
    assert rc == 1 and codes(diags) == ["P-PACKAGE"]


def test_good_package_still_reads(tmp_path, good_pkg):
    p = tmp_path / "consumer.plpkg"
    p.write_bytes(rezip(good_pkg))  # same content, rewritten: still a package
    assert read_package(str(p)).name == "consumer"
    p.write_bytes(rezip(good_pkg, contract=lambda t: t + "# a comment\n", forge=True))  # consistent digests
    assert read_package(str(p)).name == "consumer"


def test_native_crash_is_a_coded_diagnostic():
    """nvJitLink runs in a forked child: a crash there is L-LINK, and pipelink lives on."""
    import signal

    from pipelink.linker.toolkit import run_isolated

    e = rejected(run_isolated, lambda: os.kill(os.getpid(), signal.SIGSEGV), code="L-LINK", what="nvJitLink")
    assert e.codes == ["L-LINK"] and "SIGSEGV" in e.diagnostics[0].message and e.diagnostics[0].hint
    assert run_isolated(lambda x: x * 2, 21, code="L-LINK", what="t") == 42


# ---- input files ----------------------------------------------------------------------------------

def test_contract_not_utf8_is_e_file(tmp_path, capsys, toy):
    c = tmp_path / "bad.contract.toml"
    c.write_bytes(b'[component]\nname = "x\xff"\n')
    rc, diags = run_cli(capsys, "pack", "--contract", c, "--object", toy.objects["producer"], "--out", tmp_path / "x.plpkg")
    assert rc == 1 and codes(diags) == ["E-FILE"]
    assert diags[0]["facts"][0]["origin"].endswith("bad.contract.toml:2")


@pytest.mark.parametrize("flag", ["--contract", "--object", "--source"])
def test_nul_in_pack_path_is_e_file(tmp_path, capsys, toy, flag):
    args = {"--contract": TOY / "producer.contract.toml", "--object": toy.objects["producer"], "--source": TOY / "producer.cu"}
    args[flag] = f"{tmp_path}/a\0b"
    rc, diags = run_cli(capsys, "pack", *[x for kv in args.items() for x in kv], "--out", tmp_path / "x.plpkg")
    assert rc == 1 and codes(diags) == ["E-FILE"]


@pytest.mark.parametrize("what", ["kernel-nul", "package-nul", "kernel-dir", "package-dir", "kernel-not-utf8"])
def test_bad_link_inputs_are_e_file(tmp_path, capsys, packer, toy, what):
    kernel, pkgs = str(TOY / "toy.kernel.toml"), [str(packer.save(p)) for p in toy.packages]
    if what == "kernel-nul":
        kernel = "k\0.toml"
    elif what == "package-nul":
        pkgs[0] = "p\0.plpkg"
    elif what == "kernel-dir":
        kernel = str(tmp_path)
    elif what == "package-dir":
        pkgs[0] = str(tmp_path)
    else:
        (tmp_path / "k.toml").write_bytes(b"[kernel]\nname = \"\xfe\"\n")
        kernel = str(tmp_path / "k.toml")
    rc, diags = run_cli(capsys, "plan", "--kernel", kernel, *[a for p in pkgs for a in ("--package", p)])
    assert rc == 1 and codes(diags) == ["E-FILE"]


# ---- outputs ----------------------------------------------------------------------------------------

def leftovers(d: Path) -> list[str]:
    return sorted(str(p) for p in d.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".pl-"))


@pytest.mark.parametrize("case", ["dir", "under-file", "long-name", "is-the-object", "is-the-contract", "nul"])
def test_pack_out_errors_are_e_output(tmp_path, capsys, toy, case):
    obj = tmp_path / "producer.o"
    obj.write_bytes(toy.objects["producer"].read_bytes())
    contract = tmp_path / "producer.contract.toml"
    contract.write_text((TOY / "producer.contract.toml").read_text())
    (tmp_path / "afile").write_text("x")
    out = {"dir": tmp_path, "under-file": tmp_path / "afile" / "x.plpkg", "long-name": tmp_path / ("n" * 300 + ".plpkg"),
           "is-the-object": obj, "is-the-contract": contract, "nul": f"{tmp_path}/x\0.plpkg"}[case]
    before = {p: p.read_bytes() for p in (obj, contract)}
    rc, diags = run_cli(capsys, "pack", "--contract", contract, "--object", obj, "--out", out)
    assert rc == 1 and codes(diags) == ["E-OUTPUT"], diags
    assert {p: p.read_bytes() for p in before} == before  # an input is never overwritten
    assert leftovers(tmp_path) == []


def test_pack_writes_no_tmp(tmp_path, capsys, toy):
    out = tmp_path / "p" / "producer.plpkg"
    rc, _ = run_cli(capsys, "pack", "--contract", TOY / "producer.contract.toml", "--object", toy.objects["producer"],
                    "--out", out)
    assert rc == 0 and out.exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("case", ["cubin-is-manifest", "out-dir-is-a-file", "cubin-is-a-dir", "cubin-is-a-package"])
def test_link_out_errors_are_e_output(tmp_path, capsys, packer, toy, case):
    pkgs = [str(packer.save(p)) for p in toy.packages]
    (tmp_path / "afile").write_text("x")
    args = {"cubin-is-manifest": ["--cubin", tmp_path / "a", "--manifest", tmp_path / "a"],
            "out-dir-is-a-file": ["--out-dir", tmp_path / "afile"],
            "cubin-is-a-dir": ["--cubin", tmp_path, "--manifest", tmp_path / "m.json"],
            "cubin-is-a-package": ["--cubin", pkgs[0], "--manifest", tmp_path / "m.json"]}[case]
    rc, diags = run_cli(capsys, "link", "--kernel", TOY / "toy.kernel.toml", *[a for p in pkgs for a in ("--package", p)], *args)
    assert rc == 1 and codes(diags) == ["E-OUTPUT"], diags
    assert leftovers(tmp_path) == []


def test_long_kernel_name_links(tmp_path, capsys, packer, toy):
    """Temp files have fixed names: a 250-character kernel name links (its out-dir names would not fit)."""
    name = "k" * 250
    text = (TOY / "toy.kernel.toml").read_text().replace('name = "toy"', f'name = "{name}"')
    kfile = packer.kernel_file(text, "long")
    pkgs = [a for p in toy.packages for a in ("--package", str(packer.save(p)))]
    rc, diags = run_cli(capsys, "link", "--kernel", kfile, *pkgs, "--out-dir", tmp_path / "o")
    assert rc == 1 and codes(diags) == ["E-OUTPUT"]  # <name>.manifest.json is over 255 bytes
    rc, _ = run_cli(capsys, "link", "--kernel", kfile, *pkgs, "--cubin", tmp_path / "k.cubin", "--manifest", tmp_path / "k.json")
    assert rc == 0 and (tmp_path / "k.cubin").exists() and leftovers(tmp_path) == []


def test_failed_rename_restores_earlier_outputs(tmp_path, monkeypatch, toy_linked):
    from pipelink.linker import outputs
    from pipelink.linker.link import write_outputs

    d = tmp_path / "o"
    paths = {"cubin": d / "toy.cubin", "manifest": d / "toy.manifest.json", "report": d / "toy.report.json",
             "map_path": d / "toy.map.txt"}
    d.mkdir()
    for p in paths.values():
        p.write_text("earlier good output")
    real, calls = os.replace, []

    def flaky(a, b):
        calls.append((a, b))
        if len(calls) == 5:  # half-way through replacing the targets
            raise OSError(28, "No space left on device")
        return real(a, b)

    monkeypatch.setattr(outputs.os, "replace", flaky)
    e = rejected(write_outputs, toy_linked, **{k: str(v) for k, v in paths.items()})
    assert e.codes == ["E-OUTPUT"]
    assert all(p.read_text() == "earlier good output" for p in paths.values())
    assert sorted(x.name for x in d.iterdir()) == sorted(p.name for p in paths.values())


# ---- unbounded values ----------------------------------------------------------------------------------

RING = ROLE + '[ring.r]\nside = "producer"\nstage_bytes = 64\ndepth = [2, 4]\n'


@pytest.mark.parametrize("text,code", [
    (RING + "arrivals = 4294967296\n", "C-SCHEMA"),
    (RING + "arrivals = 1048576\n", "C-SCHEMA"),
    (RING + "arrivals = 2147483648\n", "C-SCHEMA"),
    (RING + "arrivals = 32\npeer_arrivals = -1\n", "C-SCHEMA"),
    (RING.replace("[2, 4]", "[true, 8]") + "arrivals = 32\n", "C-SCHEMA"),
    (ROLE + "[fact.f]\naccept = {multiple_of = 0}\n", "C-SCHEMA"),
    (ROLE + "[fact.f]\naccept = {min = 9, max = 3}\n", "C-SCHEMA"),
    (ROLE + "[fact.f]\naccept = [4294967296]\n", "C-SCHEMA"),
    (ROLE + "[fact.f]\nown = -1\n", "C-SCHEMA"),
    (ROLE + "[fact.f]\nown = 18446744073709551616\n", "C-SCHEMA"),
    (ROLE + '[smem.s]\nbytes = "' + "9" * 5000 + '"\n', "C-EXPR"),
    (ROLE + "[smem.s]\nbytes = 4294967296\n", "C-SCHEMA"),
])
def test_unbounded_contract_values_are_rejected(text, code):
    e = rejected(parse_contract_text, text, "c.toml")
    assert e.codes == [code], e
    assert e.diagnostics[0].facts[0].origin.startswith("c.toml:")


def test_huge_intermediate_values_are_expr_errors():
    from pipelink.common.expr import ExprError, evaluate

    with pytest.raises(ExprError, match="out of range"):
        evaluate("*".join(["f"] * 5), {"f": 4294967295})
    with pytest.raises(ExprError, match="out of range"):
        evaluate("9" * 30, {})


@pytest.mark.parametrize("grid", ["[true, 1, 1]", "[0, 1, 1]", "[-4, 1, 1]", "[18446744073709551616, 1, 1]",
                                  "[1, 65536, 1]", '["n", 1.5, 1]'])
def test_grid_entries_are_bounded(toy, grid):
    text = f'[kernel]\nname = "k"\ngrid = {grid}\n[[instance]]\nname = "p"\npackage = "producer"\n'
    e = rejected(parse_kernel_text, text, "k.toml", toy.packages)
    assert e.codes == ["C-SCHEMA"]


def test_empty_arch_is_rejected(capsys, packer, toy):
    pkgs = [a for p in toy.packages for a in ("--package", str(packer.save(p)))]
    rc, diags = run_cli(capsys, "plan", "--kernel", TOY / "toy.kernel.toml", *pkgs, "--arch", "")
    assert rc == 1 and codes(diags) == ["C-SCHEMA"]


# ---- silent acceptance --------------------------------------------------------------------------------

TOY_K = kernel_text("toy", ("prod", "producer"), ("cons", "consumer"), ("out", "sink"))


@pytest.mark.parametrize("bind,why", [
    ('import = "out.acx"\nexport = "cons.acc"', "no import 'acx'"),
    ('import = "out.acc"\nexport = "cons.acx"', "no export 'acx'"),
    ('import = "nobody.acc"\nexport = "cons.acc"', "no instance 'nobody'"),
    ('import = "out.acc"\nexport = "out.acc"', "no export"),
    ('import = "acc"\nexport = "cons.acc"', "is not"),
])
def test_bad_bind_is_l_bind_citing_its_line(packer, toy, bind, why):
    kfile = packer.kernel_file(TOY_K + f"\n[[bind]]\n{bind}\n", "bind")
    comp = parse_kernel_text(kfile.read_text(), str(kfile), toy.packages)
    e = rejected(plan, comp)
    d = diagnostic(e, "L-BIND")
    assert why in d.message and d.facts[0].origin == line_of(kfile, "[[bind]]")
    assert "L-TENSOR-UNBOUND" not in e.codes and "L-ROLE" not in e.codes  # no cascade
    assert "add" not in d.hint.split("(")[0] or "bind" not in d.hint.split("(")[0]


def test_self_bind_and_duplicate_bind(packer, toy, component):
    kfile = packer.kernel_file(TOY_K + '\n[[bind]]\nimport = "out.acc"\nexport = "cons.acc"\n'
                               '\n[[bind]]\nimport = "out.acc"\nexport = "cons.acc"\n', "dup")
    e = rejected(plan, parse_kernel_text(kfile.read_text(), str(kfile), toy.packages))
    d = diagnostic(e, "L-BIND")
    assert "bound twice" in d.message and len(d.facts) == 2


def test_grid_typo_is_l_grid(packer, toy):
    kfile = packer.kernel_file((TOY / "toy.kernel.toml").read_text().replace('"blocks", 1, 1', '"tiles / tilee", 1, 1'), "typo")
    e = rejected(plan, parse_kernel_text(kfile.read_text(), str(kfile), toy.packages))
    d = diagnostic(e, "L-GRID")
    assert "'tilee'" in d.message and "did you mean 'tile'" in d.hint and d.facts[0].origin == line_of(kfile, "grid =")


def test_launch_only_grid_name_must_be_declared(packer, toy):
    text = (TOY / "toy.kernel.toml").read_text()
    assert "launch_args" in text
    plan(parse_kernel_text(text, "toy.kernel.toml", toy.packages))  # declared: fine
    undeclared = "\n".join(ln for ln in text.splitlines() if not ln.startswith("launch_args"))
    e = rejected(plan, parse_kernel_text(undeclared, "toy.kernel.toml", toy.packages))
    assert 'launch_args = ["blocks"]' in diagnostic(e, "L-GRID").hint


def test_expression_may_not_read_an_undeclared_fact():
    e = rejected(parse_contract_text, ROLE + '[smem.s]\nbytes = "tile * 4"\n', "c.toml")
    assert e.codes == ["C-EXPR"] and "tile" in e.diagnostics[0].message and "[fact.tile]" in e.diagnostics[0].hint


@pytest.mark.parametrize("kernel_name,instance_name,why", [
    ("main", "p", "global name"), ("int", "p", "C++ keyword"), ("pl_k", "p", "'pl_'"), ("k", "class", "C++ keyword"),
    ("k", "__x", "reserved identifier")])
def test_names_the_generated_code_cannot_take_are_c_schema(toy, kernel_name, instance_name, why):
    """They used to pass the identifier check and fail in nvcc (L-COMPILE) or nvJitLink."""
    text = f'[kernel]\nname = "{kernel_name}"\n[[instance]]\nname = "{instance_name}"\npackage = "producer"\n'
    e = rejected(parse_kernel_text, text, "k.toml", toy.packages)
    assert e.codes == ["C-SCHEMA"] and why in e.diagnostics[0].message


def test_keyword_parameter_is_c_schema():
    e = rejected(parse_contract_text, '[component]\nname = "x"\nkind = "library"\n[params]\nfloat = "u32"\n', "c.toml")
    assert e.codes == ["C-SCHEMA"] and "keyword" in e.diagnostics[0].message


def test_sass_diff_absent_kernel_is_e_usage(tmp_path, capsys, toy_linked):
    a = tmp_path / "a.cubin"
    a.write_bytes(toy_linked.cubin)
    rc, diags = run_cli(capsys, "sass-diff", a, a, "--kernel", "nope")
    assert rc == 2 and codes(diags) == ["E-USAGE"] and "toy" in json.dumps(diags)
    (tmp_path / "junk").write_bytes(b"not a cubin")
    rc, diags = run_cli(capsys, "sass-diff", tmp_path / "junk", a)
    assert rc == 1 and codes(diags) == ["E-FILE"]
    assert str(tmp_path / "junk") in diags[0]["message"] and "/tmp/tmp" not in json.dumps(diags)  # the user's path


def test_sass_diff_of_two_kernels_is_e_usage_not_a_difference(tmp_path, capsys, toy_linked):
    """A control means something only for its own kernel: cubins of two kernels, or --kernel
    naming a function only one of them holds, are a usage error (exit 2), not 'DIFFERENT'."""
    toy, other = tmp_path / "toy.cubin", tmp_path / "yot.cubin"
    toy.write_bytes(toy_linked.cubin)
    other.write_bytes(toy_linked.cubin.replace(b"toy", b"yot"))  # same length: the ELF stays valid
    rc, diags = run_cli(capsys, "sass-diff", other, toy)
    assert rc == 2 and codes(diags) == ["E-USAGE"] and "share no function" in diags[0]["message"]
    assert [f["text"] for f in diags[0]["facts"]] == ["yot", "toy"]
    rc, diags = run_cli(capsys, "sass-diff", other, toy, "--kernel", "toy")
    assert rc == 2 and codes(diags) == ["E-USAGE"] and f"only the {toy} has" in diags[0]["message"]


@pytest.mark.parametrize("pair", [("gemm_swiglu_sm_100a.cubin", "gemm_swiglu.control.cubin"),
                                  ("gemm_swiglu.cubin", "gemm_swiglu_sm_120a.control.cubin")])
def test_sass_diff_of_two_architectures_is_e_usage_not_a_difference(tmp_path, capsys, pair):
    """A kernel's cubin for sm_100a against its sm_90a control differs in every instruction: a
    usage error naming both architectures (exit 2), not a 'DIFFERENT' verdict (exit 1)."""
    built = ROOT / "bazel-bin" / "kernels"
    if not all((built / f).exists() for f in pair):
        pytest.skip("no gemm_swiglu cubins of two architectures in bazel-bin (tools/bazel build //kernels/...)")
    a, b = tmp_path / "a.cubin", tmp_path / "b.cubin"  # copies: a concurrent build may replace bazel-bin's
    a.write_bytes((built / pair[0]).read_bytes())
    b.write_bytes((built / pair[1]).read_bytes())
    rc, diags = run_cli(capsys, "sass-diff", a, b)
    assert rc == 2 and codes(diags) == ["E-USAGE"] and "different architectures" in diags[0]["message"], diags
    assert diags[0]["hint"] and {f["text"] for f in diags[0]["facts"]} >= {"sm_90a"}


# ---- messages -----------------------------------------------------------------------------------------

def test_export_with_two_importers_gives_no_spurious_l_role(packer, toy):
    k = kernel_text("toy", ("prod", "producer"), ("cons", "consumer"), ("out", "sink"), ("out2", "sink"))
    e = rejected(plan, packer.compose(k, toy.packages, name="two"))
    assert "L-TENSOR-UNBOUND" in e.codes and "L-ROLE" not in e.codes


@pytest.mark.parametrize("old,new,code", [
    ("shape = [32, 4]", "shape = [32, 8]", "L-TENSOR-SHAPE"),  # an epilogue mutated to another tile shape
    ('dtype = "f32"', 'dtype = "bf16"', "L-TENSOR-DTYPE"),
    ('layout = "blocked"', 'layout = "mma_acc(2,4)"', "L-TENSOR-LAYOUT"),
])
def test_rejected_binding_gives_no_spurious_l_role(packer, toy, old, new, code):
    """A library that reads its warp range and whose one import was rejected (shape, dtype,
    layout) is reported once: its caller is unknown, not missing (attn_store's mutated tile shape
    gave L-TENSOR-SHAPE and 'called by 0 roles')."""
    import dataclasses
    m = toy.sink.measured
    sink = dataclasses.replace(toy.sink, measured=dataclasses.replace(
        m, handles=tuple(sorted(set(m.handles) | {"pl_sink__role__warp_begin"}))))
    plan(packer.compose(TOY_K, [toy.producer, toy.consumer, sink], name="warps_ok"))  # one caller: fine
    bad = packer.variant(sink, sink.contract_text.replace(old, new), check_object=False)
    e = rejected(plan, packer.compose(TOY_K, [toy.producer, toy.consumer, bad], name="warps_bad"))
    assert e.codes == [code]


def test_component_name_differing_from_pl_component(packer, lto, toy):
    text = (TOY / "sink.contract.toml").read_text().replace('name = "sink"', 'name = "drain"')
    e = rejected(packer.pack, text, [toy.objects["sink"]])
    d = diagnostic(e, "P-ENTRY")
    assert "pl_sink__" in d.render() and 'component.name = "sink"' in d.hint


def test_c_syntax_at_end_of_document_has_a_line():
    e = rejected(parse_contract_text, '[component]\nname = "x"\nkind = ["role"\n', "c.toml")
    assert e.codes == ["C-SYNTAX"] and e.diagnostics[0].facts[0].origin == "c.toml:3"


@pytest.mark.parametrize("text", ["a = " + "[" * 100000 + "]" * 100000, "a = " + "{b = " * 5000 + "1" + "}" * 5000])
def test_deeply_nested_toml_is_c_syntax(text):
    e = rejected(parse_contract_text, text, "c.toml")
    assert e.codes == ["C-SYNTAX"] and "nested too deeply" in e.diagnostics[0].message


def test_every_code_used_in_the_sources_is_explained(capsys):
    """A code raised anywhere (linker, runtime, entries, host providers, Bazel rules) that
    `pipelink explain` does not know is a bug of its own (R-HOST was one): scan the sources."""
    import re

    from pipelink.common.diagnostics import rule_codes

    root = Path(__file__).resolve().parents[2]
    known = {**CODES, **rule_codes()}
    assert {"B-COPT", "B-ARCH"} <= set(known), "explain reads the rules' B_CODES (errors.bzl)"
    pattern = re.compile(r"[\"']([CPLERB]-[A-Z0-9][A-Z0-9-]*)[\"']")
    used = {}
    for folder in ("tools/pipelink", "kernels", "pipelink_rules", "examples", "experiments"):
        for f in sorted((root / folder).rglob("*")):
            if f.suffix in (".py", ".bzl") and "__pycache__" not in f.parts:
                for code in pattern.findall(f.read_text()):
                    used.setdefault(code, f.relative_to(root))
    assert len(used) > 60
    unknown = {c: str(f) for c, f in used.items() if c not in known}
    assert not unknown, f"codes `pipelink explain` does not know: {unknown}"
    assert cli.main(["explain", "B-COPT"]) == 0 and "copt" in capsys.readouterr().out


def test_every_refusal_in_the_sources_has_a_hint():
    """Every LaunchError(...) and reject(...) written in the linker, runtime and kernels' entries
    passes a non-empty hint= (gemm_swiglu's odd-w refusal, its wrong-manifest refusal and a closed
    EpStep had none): scan the sources' syntax trees, so a new refusal without one fails here."""
    import ast

    root = Path(__file__).resolve().parents[2]
    missing = []
    plain_linker = root / "experiments" / "symbol_link" / "plainlink.py"  # runs the linker's passes
    for folder in ("tools/pipelink", "kernels", "examples"):
        for f in sorted((root / folder).rglob("*.py")) + ([plain_linker] if folder == "tools/pipelink" else []):
            for node in ast.walk(ast.parse(f.read_text())):
                name = getattr(node, "func", None)
                name = getattr(name, "id", getattr(name, "attr", None))
                if not isinstance(node, ast.Call) or name not in ("LaunchError", "reject"):
                    continue
                kw = {k.arg: k.value for k in node.keywords}
                if None in kw:  # **kwargs: not decidable here
                    continue
                hint = kw.get("hint")
                if hint is None or (isinstance(hint, ast.Constant) and not str(hint.value).strip()):
                    missing.append(f"{f.relative_to(root)}:{node.lineno}")
    assert not missing, f"refusals without a hint: {missing}"


def test_every_code_is_documented_and_explained(capsys):
    doc = (Path(__file__).resolve().parents[2] / "docs" / "CONTRACTS.md").read_text()
    for code in CODES:
        if not code.startswith("R-"):
            assert f"| {code} |" in doc, code
        assert cli.main(["explain", code]) == 0
    capsys.readouterr()


# ---- the control build ----------------------------------------------------------------------------------

ISO_K = kernel_text("iso", ("a", "iso_a"), ("b", "iso_b"))


def test_control_isolates_components(packer, component):
    """Both owners define struct Params, helper() and SCALE: linked and control agree."""
    from pipelink.linker.sass import compare

    a = component("iso_a", defines=["SCALE=3"])
    b = component("iso_b", defines=["SCALE=5"])
    res = link(packer.compose(ISO_K, [a, b], name="iso"), control=True)
    assert res.control_error is None, res.control_error
    assert compare(res.cubin, res.control_cubin, "iso")["identical"]


def test_control_failure_keeps_linked_outputs(tmp_path, capsys, packer, toy, lto):
    """Packed without sources: link writes its outputs, then reports L-CONTROL (exit 1)."""
    from pipelink.linker.package_io import write_package

    bare = []
    for n in ("producer", "consumer", "sink"):
        bare.append(tmp_path / f"{n}.plpkg")
        write_package(packer.pack(TOY / f"{n}.contract.toml", [toy.objects[n]]), str(bare[-1]))
    out = tmp_path / "out"
    out.mkdir()
    (out / "toy.control.cubin").write_bytes(b"earlier control")
    rc, diags = run_cli(capsys, "link", "--kernel", TOY / "toy.kernel.toml", *[a for p in bare for a in ("--package", p)],
                        "--out-dir", out, "--control-cubin", out / "toy.control.cubin")
    assert rc == 1 and codes(diags) == ["L-CONTROL"] and "--source" in diags[0]["hint"]
    assert (out / "toy.cubin").stat().st_size > 0 and (out / "toy.manifest.json").exists()
    assert (out / "toy.control.cubin").read_bytes() == b"earlier control"


# ---- contracts checked against the code ----------------------------------------------------------------

def test_pack_checks_sources_rebuild_the_object(packer, lto, toy):
    obj = lto(TOY / "consumer.cu")
    e = rejected(packer.pack, TOY / "consumer.contract.toml", [obj], sources=toy.sources("consumer"),
                 copts=["-DTOY_TILE=128"])
    assert e.codes == ["P-REBUILD"] and "own__tile" in e.diagnostics[0].render()
    e = rejected(packer.pack, TOY / "consumer.contract.toml", [obj], sources=[TOY / "consumer.cu"])
    assert e.codes == ["P-REBUILD"] and "params.h" in e.diagnostics[0].render()


def test_literal_barrier_id_is_l_sass(packer, component):
    pkg = component("rogue_bar")
    e = rejected(link, packer.compose(kernel_text("rb", ("r", "rogue_bar")), [pkg], name="rb"))
    d = diagnostic(e, "L-SASS")
    assert "[9]" in d.message and "PL_BARRIER" in d.hint


def test_spills_are_an_error_or_a_warning(packer, component):
    comp = packer.compose(kernel_text("sp", ("s", "spiller")), [component("spiller")], name="sp")
    e = rejected(link, comp)
    assert "L-REGS" in e.codes and "--spills=warning" in diagnostic(e, "L-REGS").hint
    res = link(comp, spills="warning")
    assert [w.code for w in res.warnings] == ["L-REGS"] and res.warnings[0].severity == "warning"


def test_trial_registers_over_budget_are_a_fact_of_a_spill_not_a_warning(monkeypatch):
    """ptxas takes the registers an uncapped trial compile offers: a count over the budget is
    no finding unless the linked kernel spills; then it names the likely spiller."""
    from types import SimpleNamespace as NS

    import pipelink.linker.sass
    from pipelink.linker.linked_checks import check_linked

    monkeypatch.setattr(pipelink.linker.sass, "disassemble", lambda cubin, home: {})
    role = NS(inst=NS(name="ffn", contract=NS(role=NS(origin="expert.contract.toml:31"))), regs=(128, 168),
              measured_regs=234)
    ch, pl, tk = (NS(comp=NS(name="k"), roles=[role], barriers=[]),
                  NS(budgets={"ffn": 128}, barrier_ids={}, uses_setmaxnreg=False), NS(home=""))
    assert check_linked(ch, pl, b"", {"REG": 128, "LOCAL": 0, "STACK": 0}, tk) == []
    (w,) = check_linked(ch, pl, b"", {"REG": 128, "LOCAL": 64, "STACK": 0}, tk, spills="warning")
    assert w.code == "L-REGS" and "ffn: its trial compile used 234 registers, over its budget 128" in w.render()


@pytest.mark.parametrize("script, needs", [("moe_bench.py", "moe_step.manifest.json"),
                                           ("attention_bench.py", "attn_*.manifest.json"),
                                           ("attention_flex_bench.py", "attn_*.manifest.json")])
@pytest.mark.parametrize("builds", ["before", "=somewhere", "before=", "before=/nonexistent/build"])
def test_bench_builds_option_is_checked(script, needs, builds):
    """--builds name=dir (other builds timed as columns): a malformed entry or a dir without the
    build is a usage error (exit 2) before anything runs, never a traceback or a dropped column."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "bench", "--builds", builds],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert ("is not name=dir" in r.stderr) if builds != "before=/nonexistent/build" else (needs in r.stderr)


@pytest.mark.parametrize("args", [
    ("attention_bench.py", "bench", "--decode-splits", "two"), ("attention_bench.py", "bench", "--decode-splits", "1,-2"),
    ("attention_bench.py", "bench", "--seqs", "4096,1.5"), ("attention_bench.py", "bench", "--seqs", "64"),
    ("attention_bench.py", "bench", "--decode", "8x"), ("attention_bench.py", "bench", "--decode", "8x32768x2"),
    ("attention_flex_bench.py", "bench", "--seqs", "-1"), ("gemm_swiglu_bench.py", "bench", "--m", "0"),
    ("gemm_swiglu_bench.py", "bench", "--qwen-m", "a"), ("moe_bench.py", "bound", "--tokens", "x"),
    ("moe_bench.py", "bench", "--tokens", "16,,0"), ("moe_trace.py", "--tokens", "1e3"),
    ("moe_bench.py", "bench", "--tokens", "\u00b2"), ("attention_bench.py", "bench", "--decode", "1x\u0664"),
    ("attention_ragged_bench.py", "--sequences", "0"), ("attention_ragged_bench.py", "--max-len", "x"),
    ("attention_ragged_bench.py", "--variants", "document"), ("attention_ragged_bench.py", "--kv-heads", "5")])
def test_bench_number_lists_are_checked(args):
    """The benches' lists of numbers (tokens, sequence lengths, split counts, decode shapes):
    anything else is a usage error (exit 2) naming the option, before anything runs."""
    script, *rest = args
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *rest], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr and rest[-2] in r.stderr, r.stderr


# One command of every benchmark that needs a GPU, with valid arguments.
GPU_BENCH_COMMANDS = [
    ("attention_bench.py", "bench"), ("attention_flex_bench.py", "warm"), ("attention_ragged_bench.py",),
    ("cp_attention_check.py", "sanitize"), ("gemm_swiglu_bench.py", "pair"), ("llama_decode_bench.py", "pair"),
    ("llama_decode_timeline.py",), ("moe_bench.py", "check"), ("moe_ep_baseline.py", "1"), ("moe_ep_check.py", "check"),
    ("moe_sanitize.py",), ("moe_trace.py",), ("profile_one.py", "gemm_swiglu_tma", "16"), ("ring_attention_baseline.py", "1")]


@pytest.mark.parametrize("args", GPU_BENCH_COMMANDS, ids=lambda a: " ".join(a))
def test_gpu_benchmarks_refuse_a_machine_without_a_gpu(args):
    """Where no CUDA GPU is usable, a GPU benchmark with good arguments says so, FAIL R-DEVICE
    naming the tool with a hint, and exits 1: no traceback from torch or the driver."""
    from conftest import gpu_unavailable_reason
    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is usable here")
    script, *rest = args
    if script == "profile_one.py" and not (ROOT / "bazel-bin" / "kernels" / "gemm_swiglu_tma.manifest.json").is_file():
        pytest.skip("needs //kernels:gemm_swiglu_tma built (its argument check comes first)")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *rest], capture_output=True, text=True,
                       timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "Traceback" not in out, out[-2000:]
    assert f"FAIL R-DEVICE: {script}" in out and "hint:" in out, out[-2000:]


@pytest.mark.parametrize("args", [
    ("moe_ep_baseline.py", "0"), ("moe_ep_baseline.py", "2", "x"), ("ring_attention_baseline.py", "1", "-3"),
    ("cp_attention_check.py", "bench1", "100"), ("cp_attention_check.py", "sanitize", "bogus"),
    ("moe_ep_check.py", "check", "0"), ("moe_ep_check.py", "sanitize", "memcheck", "16", "3"),
    ("profile_one.py", "gemm_swiglu_tma", "0"), ("profile_one.py", "gemm_swiglu_nope", "16"), ("profile_one.py",)])
def test_multi_rank_and_profile_scripts_check_their_arguments(args):
    """The positional arguments of the multi-rank checks and baselines and of profile_one.py
    (counts, sanitizer tools, world sizes, kernel builds): a usage error (exit 2), no traceback."""
    script, *rest = args
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *rest], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "error:" in r.stderr, r.stderr


@pytest.mark.parametrize("kernels", ["gemm_swiglu_nope", ","])
def test_gemm_bench_refuses_kernels_it_cannot_find(kernels, tmp_path):
    """A --kernels name with no build there (bazel-bin, or PIPELINK_KERNELS_DIR), or none at all:
    a usage error naming --kernels with a hint, before any GPU work."""
    env = dict(os.environ, PIPELINK_KERNELS_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gemm_swiglu_bench.py"), "pair", "--kernels", kernels],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--kernels" in r.stderr and "hint" in r.stderr, r.stderr


def test_bench_builds_option_accepts_a_build(tmp_path):
    """What a benchmark's --builds takes (gpu_bench.parse_builds), through gpu_bench.py's `builds` check."""
    (tmp_path / "moe_step.manifest.json").write_text("{}")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_bench.py"), "builds", f"a={tmp_path},",
                        "--needs", "moe_step.manifest.json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [tuple(b) for b in json.loads(r.stdout)] == [("a", str(tmp_path))]
