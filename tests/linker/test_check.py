"""Check (and solve) rejections: each composition is wrong in one way, and the diagnostic says
which code, and names both sides: the instances involved and their contract file:line.

Packages are real: the toy's and tests/components' objects packed through pipelink.linker.package.pack.
Variants change only contract fields pack does not tie to the object (sizes, depths, shapes,
accept ranges...) and are re-verified against the object's measurement (conftest.Packer.variant).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from conftest import COMPONENTS, ROOT, assert_mentions, diagnostic, kernel_text, line_of, rejected
from pipelink.linker.check import check
from pipelink.linker.compose import parse_kernel
from pipelink.linker.link import plan

TOY_KERNEL = kernel_text("toy", ("prod", "producer"), ("cons", "consumer"), ("out", "sink"))


@pytest.fixture(scope="module")
def parts(toy, component):
    """name -> package: the toy's three and the test components."""
    return {"producer": toy.producer, "consumer": toy.consumer, "sink": toy.sink,
            **{n: component(n) for n in ("worker", "bars", "callee", "caller", "meas")}}


def swap(packer, pkg, old: str, new: str):
    """A variant of pkg whose contract text has `old` replaced by `new` (exactly once)."""
    assert pkg.contract_text.count(old) == 1, (old, pkg.contract_text)
    return packer.variant(pkg, pkg.contract_text.replace(old, new))


def at(pkg, needle: str) -> str:
    """'<contract file>:<line>' of the line containing `needle` in pkg's contract."""
    return line_of(pkg.contract.file, needle)


def plan_rejects(packer, text: str, packages, code: str, **kw):
    comp = packer.compose(text, packages, **kw)
    return diagnostic(rejected(plan, comp), code)


def toy_with(parts, **replace):
    return [replace.get(n, parts[n]) for n in ("producer", "consumer", "sink")]


# ---- the toy passes --------------------------------------------------------------------------

def test_toy_check_derives_facts_rings_transfers_claims_and_roles(toy, packer):
    ch = check(parse_kernel(str(toy.kernel), toy.packages))
    assert ch.facts == {"tile": 256} and ch.fact_owner["tile"].name == "cons"
    (ring,) = ch.rings
    assert (ring.name, ring.producer.name, ring.consumer.name) == ("work", "prod", "cons")
    assert ring.stage_bytes == 1024 and ring.depth == (2, 6)  # intersection of [2, 8] and [2, 6]
    assert (ring.full_arrivals, ring.empty_arrivals) == (32, 128)
    (t,) = ch.transfers
    assert (t.kind, t.key, t.importer.name, t.shape) == ("direct", "cons.acc", "out", (32, 4))
    assert {c.key for c in ch.claims} == {"cons.smem.scratch", "ring.work.buffer", "ring.work.full", "ring.work.empty"}
    assert [b.key for b in ch.barriers] == ["cons.combine"]
    assert ch.params == {"in": "ptr", "out": "ptr", "tiles": "u32"}
    assert [r.inst.name for r in ch.roles] == ["prod", "cons"]


# ---- rejected compositions: one code each, both sides named ------------------------------------

def test_l_arch_kernel_arch(packer, parts):
    d = plan_rejects(packer, TOY_KERNEL, toy_with(parts), "L-ARCH", arch="sm_100a")
    assert_mentions(d, "prod (producer)", at(parts["producer"], "[component]"), "sm_90a", "sm_100a", "k.kernel.toml")


def test_l_arch_toolkit_major(packer, parts):
    old = parts["consumer"]
    cons = dataclasses.replace(old, measured=dataclasses.replace(old.measured, toolkit="12.8"))
    d = plan_rejects(packer, TOY_KERNEL, toy_with(parts, consumer=cons), "L-ARCH")
    assert "CUDA majors" in d.message
    assert_mentions(d, "cons (consumer)", "toolkit 12.8", "prod (producer)", "toolkit 13.")


def test_l_instance_unknown_package(packer, parts):
    text = kernel_text("k", ("prod", "producer"), ("cons", "consumr"))
    d = diagnostic(rejected(packer.compose, text, toy_with(parts), all_packages=True), "L-INSTANCE")
    assert_mentions(d, "consumr", "k.kernel.toml:10", "consumer, producer, sink")


def test_l_instance_package_no_instance_uses(packer, parts):
    """A package given to the link that no instance names would be linked into nothing, while
    every change of it relinks the kernel: a forgotten [[instance]] or a stale component."""
    text = kernel_text("k", ("prod", "producer"), ("cons", "consumer"))
    d = diagnostic(rejected(packer.compose, text, toy_with(parts), all_packages=True), "L-INSTANCE")
    assert_mentions(d, "package 'sink' is given but no [[instance]] uses it", "package: ",
                    "instances: prod (producer), cons (consumer)", "add an [[instance]] with package = 'sink'")


def test_l_instance_duplicate_instance(packer, parts):
    text = kernel_text("k", ("prod", "producer"), ("prod", "consumer"))
    d = diagnostic(rejected(packer.compose, text, toy_with(parts)), "L-INSTANCE")
    assert_mentions(d, "'prod' appears twice", "k.kernel.toml:10")


def test_l_instance_duplicate_package(packer, parts):
    d = diagnostic(rejected(packer.compose, TOY_KERNEL, toy_with(parts) + [parts["sink"]]), "L-INSTANCE")
    assert "sink" in d.message and len(d.facts) == 2


def test_l_params(packer, parts):
    sink = swap(packer, parts["sink"], 'tiles = "u32"', 'tiles = "u64"')
    d = plan_rejects(packer, TOY_KERNEL, toy_with(parts, sink=sink), "L-PARAMS")
    assert d.clause == "params.tiles"
    assert_mentions(d, "prod (producer)", at(parts["producer"], "tiles ="), "out (sink)", at(sink, "tiles ="))


def test_l_fact_owners_two_owners(packer, parts):
    # Two instances of a fact-owning package: `width` would have two owners.
    text = kernel_text("k", ("m0", "meas"), ("m1", "meas"))
    d = plan_rejects(packer, text, [parts["meas"]], "L-FACT-OWNERS")
    assert d.clause == "fact.width"
    where = at(parts["meas"], "[fact.width]")
    assert_mentions(d, "m0 (meas)", "m1 (meas)", where)


def test_l_fact_owners_no_owner(packer, parts):
    text = kernel_text("k", ("prod", "producer"), ("w", "worker"))
    rej = rejected(plan, packer.compose(text, [parts["producer"], parts["worker"]]))
    d = next(d for d in rej.diagnostics if d.code == "L-FACT-OWNERS")
    assert "no component owns it" in d.message
    assert_mentions(d, "prod (producer)", at(parts["producer"], "[fact.tile]"))


def test_l_fact_type(packer, parts):
    """Not reachable from a contract file today (the only fact type is u32): a contract built
    in memory with another type still gets a coded diagnostic naming both sides."""
    prod = parts["producer"]
    facts = tuple(dataclasses.replace(f, type="u64") if f.name == "tile" else f for f in prod.contract.facts)
    prod = dataclasses.replace(prod, contract=dataclasses.replace(prod.contract, facts=facts))
    d = plan_rejects(packer, TOY_KERNEL, toy_with(parts, producer=prod), "L-FACT-TYPE")
    assert_mentions(d, "cons (consumer)", at(parts["consumer"], "[fact.tile]"), "prod (producer)",
                    at(parts["producer"], "[fact.tile]"), "u64")


def test_l_fact_accept(packer, parts):
    prod = swap(packer, parts["producer"], "accept = { min = 32, max = 4096, multiple_of = 32 }", "accept = [64, 128]")
    d = plan_rejects(packer, TOY_KERNEL, toy_with(parts, producer=prod), "L-FACT-ACCEPT")
    # Each side cites the line of its value (`own =`, `accept =`), not the [fact.tile] header.
    assert_mentions(d, "cons (consumer)", "own = 256", at(parts["consumer"], "own = 256"),
                    "prod (producer)", "accept = [64, 128]", at(prod, "accept = [64, 128]"))


def test_l_fact_accept_range(packer, parts):
    prod = swap(packer, parts["producer"], "multiple_of = 32", "multiple_of = 96")
    d = plan_rejects(packer, TOY_KERNEL, toy_with(parts, producer=prod), "L-FACT-ACCEPT")
    assert_mentions(d, "multiple_of = 96", at(prod, "multiple_of = 96"), at(parts["consumer"], "own = 256"))


def test_l_ring_side_missing_producer(packer, parts):
    text = kernel_text("k", ("cons", "consumer"), ("out", "sink"))
    d = plan_rejects(packer, text, toy_with(parts), "L-RING-SIDE")
    assert "no producer" in d.message
    assert_mentions(d, "cons (consumer)", at(parts["consumer"], "[ring.work]"))


def test_l_ring_side_two_producers(packer, parts):
    text = kernel_text("k", ("p0", "producer"), ("p1", "producer"), ("cons", "consumer"), ("out", "sink"))
    d = plan_rejects(packer, text, toy_with(parts), "L-RING-SIDE")
    assert "2 producers and 1 consumers" in d.message
    assert_mentions(d, "p0 (producer)", "p1 (producer)", "cons (consumer)",
                    at(parts["producer"], "[ring.work]"), at(parts["consumer"], "[ring.work]"))


def test_l_ring_stage(packer, parts):
    prod = swap(packer, parts["producer"], 'stage_bytes = "tile * 4"', 'stage_bytes = "tile * 2"')
    d = plan_rejects(packer, TOY_KERNEL, toy_with(parts, producer=prod), "L-RING-STAGE")
    assert "512" in d.message and "1024" in d.message
    assert_mentions(d, "prod (producer)", at(prod, "[ring.work]"), "cons (consumer)", at(parts["consumer"], "[ring.work]"))


def test_l_ring_depth(packer, parts):
    prod = swap(packer, parts["producer"], "depth = [2, 8]", "depth = [8, 8]")
    d = plan_rejects(packer, TOY_KERNEL, toy_with(parts, producer=prod), "L-RING-DEPTH")
    assert_mentions(d, "prod (producer)", "[8, 8]", at(prod, "[ring.work]"),
                    "cons (consumer)", "[2, 6]", at(parts["consumer"], "[ring.work]"))


def test_l_ring_arrivals(packer, parts):
    prod = swap(packer, parts["producer"], "arrivals = 32 ", "arrivals = 1 ")
    d = plan_rejects(packer, TOY_KERNEL, toy_with(parts, producer=prod), "L-RING-ARRIVALS")
    assert_mentions(d, "cons (consumer)", "peer_arrivals = 32", at(parts["consumer"], "[ring.work]"),
                    "prod (producer)", "arrivals = 1", at(prod, "[ring.work]"))


def test_l_tensor_unbound_export(packer, parts):
    text = kernel_text("k", ("prod", "producer"), ("cons", "consumer"))
    d = plan_rejects(packer, text, toy_with(parts), "L-TENSOR-UNBOUND")
    assert "nothing imports it" in d.message
    assert_mentions(d, "cons (consumer)", at(parts["consumer"], "[export.acc]"))


def test_l_tensor_unbound_import(packer, parts):
    text = kernel_text("k", ("w", "worker"), ("out", "sink"))
    d = plan_rejects(packer, text, [parts["worker"], parts["sink"]], "L-TENSOR-UNBOUND")
    assert "no component exports it" in d.message
    assert_mentions(d, "out (sink)", at(parts["sink"], "[import.acc]"))


def test_l_tensor_unbound_export_bound_twice(packer, parts):
    text = kernel_text("k", ("prod", "producer"), ("cons", "consumer"), ("o1", "sink"), ("o2", "sink"))
    d = plan_rejects(packer, text, toy_with(parts), "L-TENSOR-UNBOUND")
    assert "bound to two imports" in d.message
    assert_mentions(d, "o1 (sink)", "o2 (sink)", at(parts["sink"], "[import.acc]"))


def test_l_bind_to_a_missing_export(packer, parts):
    """A bind naming an export that does not exist is L-BIND at the [[bind]] line (it was
    L-TENSOR-UNBOUND citing only the import, with a hint to add a bind)."""
    text = TOY_KERNEL + '\n[[bind]]\nimport = "out.acc"\nexport = "prod.acc"\n'
    kfile = packer.kernel_file(text, "k")
    d = plan_rejects(packer, text, toy_with(parts), "L-BIND")
    assert_mentions(d, "no export 'acc'", line_of(kfile, "[[bind]]"))


@pytest.mark.parametrize("code,old,new,says", [
    ("L-TENSOR-SHAPE", "shape = [32, 4]", "shape = [32, 8]", "[32, 8]"),
    ("L-TENSOR-DTYPE", 'dtype = "f32"', 'dtype = "f16"', "f16"),
    ("L-TENSOR-SPACE", 'space = "reg"', 'space = "smem"', "smem/warp"),
    ("L-TENSOR-SPACE", 'scope = "warp"', 'scope = "role"', "reg/role"),
    ("L-TENSOR-LAYOUT", 'layout = "blocked"', 'layout = "mma_acc(2,4)"', "mma_acc(2,4)"),
])
def test_l_tensor_mismatch(packer, parts, code, old, new, says):
    sink = swap(packer, parts["sink"], old, new)
    d = plan_rejects(packer, TOY_KERNEL, toy_with(parts, sink=sink), code)
    assert d.clause.startswith("import.acc")
    assert_mentions(d, "cons (consumer)", at(parts["consumer"], "[export.acc]"), "out (sink)",
                    at(sink, "[import.acc]"), says)


def test_l_tensor_layout_staged_tile_must_divide(packer, parts):
    cons = swap(packer, parts["consumer"], "shape = [32, 4]", "shape = [3, 5]")
    sink = swap(packer, swap(packer, parts["sink"], "shape = [32, 4]", "shape = [3, 5]"),
                'layout = "blocked"', 'layout = "cyclic"')
    d = plan_rejects(packer, TOY_KERNEL, toy_with(parts, consumer=cons, sink=sink), "L-TENSOR-LAYOUT")
    assert "15 elements do not divide among 32 threads" in d.message
    assert_mentions(d, "cons (consumer)", at(cons, "[export.acc]"), "out (sink)", at(sink, "[import.acc]"))


def test_l_call_unbound(packer, parts):
    text = kernel_text("k", ("c", "caller"))
    d = plan_rejects(packer, text, [parts["caller"]], "L-CALL-UNBOUND")
    assert_mentions(d, "c (caller)", at(parts["caller"], "[callable.import.scale]"), "void(float*,unsigned)")


def test_l_call_signature(packer, parts):
    caller = swap(packer, parts["caller"], 'signature = "void(float*, unsigned)"', 'signature = "void(float*, int)"')
    text = kernel_text("k", ("c", "caller"), ("lib", "callee"))
    d = plan_rejects(packer, text, [caller, parts["callee"]], "L-CALL-SIGNATURE")
    assert_mentions(d, "c (caller)", at(caller, "[callable.import.scale]"), "void(float*,int)",
                    "lib (callee)", at(parts["callee"], "[callable.export.scale]"), "void(float*,unsigned)")


def test_l_barrier(packer, parts):
    text = kernel_text("k", ("b0", "bars"), ("b1", "bars"))  # 2 x 8 named barriers > 15 ids
    d = plan_rejects(packer, text, [parts["bars"]], "L-BARRIER")
    assert "16 named barriers" in d.message
    assert_mentions(d, "b0.b0", "b1.b7", "b0 (bars)", "b1 (bars)", at(parts["bars"], "[barrier.b7]"))


@pytest.mark.parametrize("threads", [48, 2048, 0])
def test_l_barrier_threads(packer, parts, threads):
    w = swap(packer, parts["worker"], 'threads = "role"', f"threads = {threads}")
    d = plan_rejects(packer, kernel_text("k", ("w", "worker")), [w], "L-BARRIER-THREADS")
    assert_mentions(d, "w (worker)", f"threads = {threads}", at(w, "[barrier.sync]"))


def test_l_warps_too_many(packer, parts):
    w = swap(packer, parts["worker"], "warps = 2", "warps = 20")
    d = plan_rejects(packer, kernel_text("k", ("w0", "worker"), ("w1", "worker")), [w], "L-WARPS")
    assert "40 warps" in d.message
    assert_mentions(d, "w0 (worker)", "w1 (worker)", at(w, "[role]"))


def test_l_warps_alignment(packer, parts):
    """27 warps fit a block, but nine warp-group-aligned 3-warp roles need nine warp groups."""
    w = swap(packer, parts["worker"], "warps = 2", "warps = 3\nwarpgroup_aligned = true")
    text = kernel_text("k", *[(f"w{i}", "worker") for i in range(9)])
    d = plan_rejects(packer, text, [w], "L-WARPS")
    assert_mentions(d, "w0", "w8", "warp-group aligned", at(w, "[role]"))


def test_l_role(packer, parts):
    d = plan_rejects(packer, kernel_text("k", ("lib", "callee")), [parts["callee"]], "L-ROLE")
    assert_mentions(d, "lib (callee)", "k.kernel.toml")


def test_l_smem(packer, parts):
    cons = swap(packer, parts["consumer"], "bytes = 2048", "bytes = 231000")
    d = plan_rejects(packer, TOY_KERNEL, toy_with(parts, consumer=cons), "L-SMEM")
    # Both sides: the claim that does not fit (with its contract line) and the ring it competes with.
    assert_mentions(d, "cons.smem.scratch: 231000 B", at(cons, "[smem.scratch]"), "ring.work.buffer",
                    at(parts["producer"], "[ring.work]"), "232448 B")


def test_l_regs(packer, parts):
    w = swap(packer, parts["worker"], "warps = 2\nregs = [24, 128]", "warps = 8\nregs = [256, 256]")
    d = plan_rejects(packer, kernel_text("k", ("w0", "worker"), ("w1", "worker")), [w], "L-REGS")
    assert_mentions(d, "w0", "w1", "regs = [256, 256]", at(w, "[role]"))


def test_c_expr_at_parse_for_an_undeclared_name(packer, parts):
    """A name the contract does not declare is caught at parse time, on its line."""
    e = rejected(swap, packer, parts["producer"], 'stage_bytes = "tile * 4"', 'stage_bytes = "tiel * 4"')
    assert e.codes == ["C-EXPR"]
    assert_mentions(e.diagnostics[0], "tiel", "stage_bytes", "[fact.tiel]")


def test_c_expr_at_check(packer, parts):
    prod = swap(packer, parts["producer"], 'stage_bytes = "tile * 4"', 'stage_bytes = "tile * 4 // (tile - 256)"')
    d = plan_rejects(packer, TOY_KERNEL, toy_with(parts, producer=prod), "C-EXPR")
    assert_mentions(d, "prod (producer)", "division by zero", at(prod, "[ring.work]"))


def test_c_expr_size_not_positive(packer, parts):
    cons = swap(packer, parts["consumer"], "bytes = 2048", 'bytes = "tile - 256"')
    d = plan_rejects(packer, TOY_KERNEL, toy_with(parts, consumer=cons), "C-EXPR")
    assert "a size must be positive" in d.message
    assert_mentions(d, "cons (consumer)", "= 0", at(cons, "[smem.scratch]"))


def test_all_conflicts_reported_together(packer, parts):
    prod = swap(packer, parts["producer"], "depth = [2, 8]", "depth = [8, 8]")
    sink = swap(packer, parts["sink"], 'dtype = "f32"', 'dtype = "bf16"')
    rej = rejected(plan, packer.compose(TOY_KERNEL, toy_with(parts, producer=prod, sink=sink), arch="sm_100a"))
    assert {"L-ARCH", "L-RING-DEPTH", "L-TENSOR-DTYPE"} <= set(rej.codes)


def test_every_code_has_an_explanation():
    from pipelink.common.diagnostics import CODES

    covered = {"L-ARCH", "L-INSTANCE", "L-PARAMS", "L-FACT-OWNERS", "L-FACT-TYPE", "L-FACT-ACCEPT", "L-RING-SIDE",
               "L-RING-STAGE", "L-RING-DEPTH", "L-RING-ARRIVALS", "L-TENSOR-UNBOUND", "L-TENSOR-SHAPE",
               "L-TENSOR-DTYPE", "L-TENSOR-SPACE", "L-TENSOR-LAYOUT", "L-CALL-UNBOUND", "L-CALL-SIGNATURE",
               "L-BARRIER", "L-BARRIER-THREADS", "L-WARPS", "L-ROLE", "L-SMEM", "L-REGS", "C-EXPR"}
    assert covered <= set(CODES)


# ---- the CLI: coded diagnostics, exit 1, JSON, no traceback, no output left behind -----------------

def _cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    env.pop("PIPELINK_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "pipelink", *args], capture_output=True, text=True, env=env, cwd=cwd)


@pytest.fixture(scope="module")
def bad_link(tmp_path_factory, packer, parts):
    """A kernel file + package files whose link is rejected (ring depth ranges do not meet)."""
    d = tmp_path_factory.mktemp("cli")
    prod = swap(packer, parts["producer"], "depth = [2, 8]", "depth = [8, 8]")
    pkgs = [packer.save(p) for p in toy_with(parts, producer=prod)]
    kernel = d / "toy.kernel.toml"
    kernel.write_text(TOY_KERNEL)
    args = ["--kernel", str(kernel)] + [a for p in pkgs for a in ("--package", str(p))]
    return d, args, prod


def test_cli_link_json(bad_link):
    d, args, prod = bad_link
    out = d / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = _cli("--format=json", "link", *args, "--out-dir", str(out), "--control-cubin", str(out / "c.cubin"))
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] is False
    (diag,) = doc["diagnostics"]
    assert diag["code"] == "L-RING-DEPTH" and diag["clause"] == "ring.work.depth" and diag["hint"]
    origins = {f["origin"] for f in diag["facts"]}
    assert at(prod, "[ring.work]").split("/")[-1] in {o.split("/")[-1] for o in origins}
    assert {f["side"] for f in diag["facts"]} == {"prod (producer)", "cons (consumer)"}
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]  # nothing written, nothing removed
    assert "Traceback" not in r.stdout + r.stderr


def test_cli_link_human(bad_link):
    d, args, _ = bad_link
    out = d / "human"
    r = _cli("link", *args, "--out-dir", str(out))
    assert r.returncode == 1
    assert "error L-RING-DEPTH" in r.stderr and "hint:" in r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert not out.exists() or not any(out.iterdir())


def test_cli_plan_and_explain(bad_link):
    _, args, _ = bad_link
    r = _cli("--format=json", "plan", *args)
    assert r.returncode == 1 and json.loads(r.stdout)["diagnostics"][0]["code"] == "L-RING-DEPTH"
    r = _cli("explain", "L-RING-DEPTH")
    assert r.returncode == 0 and "depth" in r.stdout
    r = _cli("--format=json", "explain")
    assert r.returncode == 0 and "L-SMEM" in json.loads(r.stdout)


def test_cli_input_errors_are_coded(tmp_path, bad_link):
    _, args, _ = bad_link
    bad_kernel = tmp_path / "bad.kernel.toml"
    bad_kernel.write_text("[kernel\n")
    junk = tmp_path / "junk.plpkg"
    junk.write_bytes(b"junk")
    cases = [
        (["link", "--kernel", str(tmp_path / "missing.toml"), *args[2:], "--out-dir", str(tmp_path)], "E-FILE", 1),
        (["link", "--kernel", str(bad_kernel), *args[2:], "--out-dir", str(tmp_path)], "C-SYNTAX", 1),
        (["plan", "--kernel", args[1], "--package", str(junk)], "P-PACKAGE", 1),
        (["link", "--kernel", args[1]], "E-USAGE", 2),
        (["explain", "X-NOPE"], "E-USAGE", 2),
        (["frobnicate"], "E-USAGE", 2),
    ]
    for argv, code, rc in cases:
        r = _cli("--format=json", *argv)
        assert r.returncode == rc, (argv, r.stdout, r.stderr)
        assert json.loads(r.stdout)["diagnostics"][0]["code"] == code, (argv, r.stdout)
        assert "Traceback" not in r.stdout + r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.kernel.toml", "junk.plpkg"]
