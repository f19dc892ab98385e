"""Classes of bad input found by the real-kernel corpora of tests/fuzz/cli.py
(tests/fuzz/corpora.py): each was accepted by `plan` (and failed only at launch, in
nvJitLink, or in the generated C++), and is now a coded diagnostic with its file:line and a
hint. One test per class, over every clause of that kind.
"""

from __future__ import annotations

import json

import pytest

from conftest import TOY, diagnostic, rejected
from pipelink.linker.compose import parse_kernel_text
from pipelink.linker.contract import parse_contract_text
from pipelink.common.diagnostics import Rejected
from pipelink.linker.link import plan

CONSUMER = (TOY / "consumer.contract.toml").read_text()
LIB = '[component]\nname = "lib"\nkind = "library"\n[fact.tile]\naccept = [256]\n'


def _c(old: str, new: str, base: str = CONSUMER) -> str:
    assert base.count(old) == 1, old
    return base.replace(old, new)


def _contract_rejects(text: str, code: str, needle: str):
    with pytest.raises(Rejected) as e:
        parse_contract_text(text, "c.contract.toml")
    d = diagnostic(e.value, code)
    assert d.hint and d.facts and all(f.origin.startswith("c.contract.toml:") for f in d.facts), d
    line = int(d.facts[0].origin.rsplit(":", 1)[1])
    assert needle in text.splitlines()[line - 1], (needle, line, d)
    return d


# ---- class 1: a divisor that is the constant 0 (every clause with an expression) ---------------------

DIVISOR_ZERO = {
    "smem.bytes": ("bytes = 2048", 'bytes = "2048 // 0"'),
    "ring.stage_bytes": ('stage_bytes = "tile * 4"', 'stage_bytes = "tile * 4 // (2 - 2)"'),
    "ring.arrivals": ("arrivals = 128", 'arrivals = "ceil_div(128, 0)"'),
    "ring.peer_arrivals": ("peer_arrivals = 32", 'peer_arrivals = "32 % 0"'),
    "export.shape": ("shape = [32, 4]", 'shape = ["tile / 0", 4]'),
}


@pytest.mark.parametrize("clause", sorted(DIVISOR_ZERO))
def test_constant_zero_divisor_is_c_expr(clause):
    old, new = DIVISOR_ZERO[clause]
    d = _contract_rejects(_c(old, new), "C-EXPR", new.split(" =")[0])
    assert "division by zero" in d.message and "always 0" in d.message


@pytest.mark.parametrize("divisor", ["1+" * 600 + "1", "1+" * 600 + "0 - 600"])
def test_deeply_nested_constant_divisor_is_c_expr_not_a_crash(divisor):
    # The divisor's value is computed when parsed; past Python's recursion limit it was an E-INTERNAL.
    d = _contract_rejects(_c("bytes = 2048", f'bytes = "tile // ({divisor})"'), "C-EXPR", "bytes =")
    assert "nested too deeply" in d.message


def test_constant_zero_divisor_in_a_workspace_size_is_c_expr():
    # A workspace size is evaluated at every launch: a constant 0 divisor fails every one of them.
    text = CONSUMER + '\n[workspace.flags]\nbytes = "tiles * 4 // (1 - 1)"\n'
    d = _contract_rejects(text, "C-EXPR", "bytes =")
    assert "division by zero" in d.message


# ---- class 2: a constant expression outside the bounds of the integer it stands for -------------------

CONSTANT_BOUNDS = {
    "smem.bytes negative": ("bytes = 2048", 'bytes = "0 - 1"'),
    "smem.bytes zero": ("bytes = 2048", 'bytes = "1 / 2"'),
    "ring.stage_bytes": ('stage_bytes = "tile * 4"', 'stage_bytes = "4294967296"'),
    "ring.arrivals": ("arrivals = 128", 'arrivals = "1048576"'),   # the mbarrier count limit is 2^20-1
    "ring.peer_arrivals": ("peer_arrivals = 32", 'peer_arrivals = "-(32)"'),
    "export.shape": ("shape = [32, 4]", 'shape = ["32", "2 - 2"]'),
}


@pytest.mark.parametrize("clause", sorted(CONSTANT_BOUNDS))
def test_constant_expression_is_bounded_like_an_integer(clause):
    old, new = CONSTANT_BOUNDS[clause]
    d = _contract_rejects(_c(old, new), "C-EXPR", new.split(" =")[0])
    assert "must be in 1.." in d.message


def test_constant_workspace_size_is_bounded():
    _contract_rejects(CONSUMER + '\n[workspace.flags]\nbytes = "4 - 4"\n', "C-EXPR", "bytes =")


def test_valid_constant_expressions_still_parse():
    c = parse_contract_text(_c("shape = [32, 4]", 'shape = ["32", "2 * 2"]'), "c.contract.toml")
    assert c.tensors[0].shape == ("32", "2 * 2")  # kept as written (the manifest and checks compare them)


GRIDS = {
    "divisor zero": '["ceil_div(blocks, 0)", 1, 1]',
    "constant zero": '["blocks", "1 / 2", 1]',
    "constant negative": '["-(1)", 1, 1]',
    "y over 65535": '["blocks", "65535 + 1", 1]',
}


@pytest.mark.parametrize("case", sorted(GRIDS))
def test_constant_grid_expression_is_c_expr(toy, case):
    text = (TOY / "toy.kernel.toml").read_text().replace('grid = ["blocks", 1, 1]', f"grid = {GRIDS[case]}")
    with pytest.raises(Rejected) as e:
        parse_kernel_text(text, "k.kernel.toml", toy.packages)
    d = diagnostic(e.value, "C-EXPR")
    assert d.clause == "kernel.grid" and d.hint
    line = int(d.facts[0].origin.rsplit(":", 1)[1])
    assert text.splitlines()[line - 1].startswith("grid =")


# ---- class 3: ring arrivals computed from facts, past the mbarrier count -------------------------------

def test_arrivals_expression_over_facts_is_bounded_by_the_mbarrier_count(packer, toy):
    cons = packer.variant(toy.consumer, _c("arrivals = 128", 'arrivals = "tile * 4096"', toy.consumer.contract_text))
    comp = packer.compose((TOY / "toy.kernel.toml").read_text(), [toy.producer, cons, toy.sink])
    d = diagnostic(rejected(plan, comp), "C-EXPR")
    assert "ring.work.arrivals" in d.message and "1048576" in d.message and "1..1048575" in d.message
    assert "mbarrier" in d.hint and d.facts[0].origin.rsplit(":", 1)[1].isdigit()


# ---- class 4: callable signatures are pasted into the generated C++ ------------------------------------

BAD_SIGNATURES = ["unsigned(", "int", "void(,)", "void(int,)", 'void(int); asm("trap"); void f(', "void(int)//",
                  "void(int = 3)", "void(int){}", "(int)", "void(int)(int)", "x" * 1001 + "(int)"]


@pytest.mark.parametrize("direction", ["import", "export"])
@pytest.mark.parametrize("sig", BAD_SIGNATURES)
def test_callable_signature_must_be_a_c_function_type(direction, sig):
    text = LIB + f"[callable.{direction}.f]\nsignature = {json.dumps(sig)}\n"
    d = _contract_rejects(text, "C-SCHEMA", "signature =")
    assert "C function type" in d.message


@pytest.mark.parametrize("sig", ["void()", "void(void)", "void ( float * ,unsigned )", "unsigned long long(const pl::X&)",
                                 "unsigned(unsigned, unsigned, unsigned, const void*, unsigned*)", "void(float* const)"])
def test_valid_signatures_still_parse(sig):
    parse_contract_text(LIB + f'[callable.import.f]\nsignature = "{sig}"\n', "c.contract.toml")


# ---- class 5: a co_resident grid that names resident_ctas but is not bounded by it -------------------

@pytest.fixture(scope="module")
def waiting_consumer(packer, toy):
    return packer.pack(_c("[component]\n", "[component]\nco_resident = true\n", toy.contract_text("consumer")),
                       [toy.objects["consumer"]])


@pytest.mark.parametrize("grid", ['"resident_ctas * 2", 1, 1', '"resident_ctas + 1", 1, 1', '"resident_ctas", "blocks", 1',
                                  '"max(resident_ctas, blocks)", 1, 1'])
def test_grid_that_can_exceed_resident_ctas_is_l_resident(packer, toy, waiting_consumer, grid):
    text = (TOY / "toy.kernel.toml").read_text().replace('grid = ["blocks", 1, 1]', f"grid = [{grid}]")
    comp = packer.compose(text, [toy.producer, waiting_consumer, toy.sink], name="over")
    d = diagnostic(rejected(plan, comp), "L-RESIDENT")
    assert "can exceed resident_ctas" in d.message and "CTAs" in d.message and d.hint
    assert any("co_resident = true" in f.text for f in d.facts)


@pytest.mark.parametrize("grid", ['"resident_ctas", 1, 1', '"min(resident_ctas, blocks)", 1, 1',
                                  '"2 * min(resident_ctas // 2, blocks)", 1, 1', '"min(num_sms, blocks)", 1, 1'])
def test_bounded_grids_still_plan(packer, toy, waiting_consumer, grid):
    text = (TOY / "toy.kernel.toml").read_text().replace('grid = ["blocks", 1, 1]', f"grid = [{grid}]")
    if "num_sms" in grid:  # names no resident_ctas: the existing rule applies
        diagnostic(rejected(plan, packer.compose(text, [toy.producer, waiting_consumer, toy.sink], name="sms")),
                   "L-RESIDENT")
        return
    plan(packer.compose(text, [toy.producer, waiting_consumer, toy.sink], name="ok"))


# ---- class 6: a name that is both a host parameter and a fact ------------------------------------------

def test_parameter_named_like_a_fact_is_l_params(packer, toy):
    name = "tile"  # the consumer owns fact tile; the sink now also takes a host value `tile`
    text = toy.contract_text("sink")
    sink = packer.variant(toy.sink, text.replace("[params]\n", f'[params]\n{name} = "u32"\n', 1))
    comp = packer.compose((TOY / "toy.kernel.toml").read_text(), [toy.producer, toy.consumer, sink], name="clash")
    d = diagnostic(rejected(plan, comp), "L-PARAMS")
    assert "both a parameter" in d.message and d.clause == f"params.{name}" and d.hint
    assert d.facts[0].origin.rsplit(":", 1)[1].isdigit()
    assert "consumer.contract.toml:" in d.facts[1].origin  # the owner's fact clause, with its line


# ---- class 7: run-time expressions (grid, workspace size) that no launch could use ----------------------

NEVER = {
    "grid overflows": ('"(blocks) * 4294967296 * 4294967296 * 4294967296", 1, 1', "beyond 2^64"),
    "grid divides by zero": ('"blocks % (blocks - blocks)", 1, 1', "division by zero"),
    "grid negative": ('"blocks - 4294967296", 1, 1', "-4294967295"),
    "grid y over 65535": ('"blocks", "blocks * 4294967296", 1', "1..65535"),
}


@pytest.mark.parametrize("case", sorted(NEVER))
def test_grid_no_launch_could_use_is_c_expr(toy, case):
    grid, needle = NEVER[case]
    text = (TOY / "toy.kernel.toml").read_text().replace('grid = ["blocks", 1, 1]', f"grid = [{grid}]")
    with pytest.raises(Rejected) as e:
        parse_kernel_text(text, "k.kernel.toml", toy.packages)
    d = diagnostic(e.value, "C-EXPR")
    assert "for every value tried" in d.message and needle in d.message and d.clause == "kernel.grid" and d.hint


@pytest.mark.parametrize("size", ['"tiles * 0 - 1"', '"tiles * 18446744073709551616 * 2"', '"tiles // (tiles - tiles)"'])
def test_workspace_size_no_launch_could_use_is_c_expr(size):
    d = _contract_rejects(CONSUMER + f"\n[workspace.flags]\nbytes = {size}\n", "C-EXPR", "bytes =")
    assert "for every value tried" in d.message


@pytest.mark.parametrize("grid", ['"blocks / 4096", 1, 1', '"blocks - 2000000", 1, 1', '"blocks", "blocks", 1'])
def test_grids_some_launch_can_use_still_parse(toy, grid):
    text = (TOY / "toy.kernel.toml").read_text().replace('grid = ["blocks", 1, 1]', f"grid = [{grid}]")
    parse_kernel_text(text, "k.kernel.toml", toy.packages)


# ---- class 8: a parameter or fact named like a value the runtime supplies ------------------------------

@pytest.mark.parametrize("name", ["num_sms", "resident_ctas", "grid_x"])
@pytest.mark.parametrize("where", ["params", "fact"])
def test_runtime_supplied_names_are_reserved(name, where):
    from pipelink.linker.contract import RUNTIME_NAMES
    from pipelink.runtime import BUILTIN_GRID_NAMES

    assert set(BUILTIN_GRID_NAMES) <= set(RUNTIME_NAMES)
    text = _c("[params]\n", f'[params]\n{name} = "u32"\n') if where == "params" else \
        CONSUMER + f"\n[fact.{name}]\naccept = [1]\n"
    d = _contract_rejects(text, "C-SCHEMA", name)
    assert "runtime supplies" in d.message


# ---- class 9: a named barrier counting more threads than the kernel's roles have (a hang) ----------------

@pytest.mark.parametrize("threads", [192, 1024])
def test_barrier_counting_more_threads_than_the_roles_is_l_barrier_threads(packer, toy, threads):
    # The toy's roles have 1 + 4 warps = 160 threads: bar.sync with a larger count never completes.
    cons = packer.variant(toy.consumer, _c('threads = "role"', f"threads = {threads}", toy.consumer.contract_text))
    comp = packer.compose((TOY / "toy.kernel.toml").read_text(), [toy.producer, cons, toy.sink])
    d = diagnostic(rejected(plan, comp), "L-BARRIER-THREADS")
    assert f"counts {threads} threads, but the kernel's roles have 160" in d.message and d.hint
    assert len(d.facts) == 3 and all(f.origin.rsplit(":", 1)[1].isdigit() for f in d.facts)


def test_barrier_within_the_roles_still_plans(packer, toy):
    cons = packer.variant(toy.consumer, _c('threads = "role"', "threads = 160", toy.consumer.contract_text))
    plan(packer.compose((TOY / "toy.kernel.toml").read_text(), [toy.producer, cons, toy.sink]))


# ---- class: a name with a trailing newline (the identifier check used `$`) ---------------------------
# `^[A-Za-z_]\w*$` also matches "tile\n": every identifier of a contract, kernel file or package
# took one, and the generated CUDA broke late (a kernel name "toy\n" ended the `//` comment it is
# printed in, L-COMPILE) or the handles stopped matching.

NEWLINE_NAMES = {
    "component.name": ('name = "consumer"', 'name = "consumer\\n"'),
    "component.entry": ('entry = "main"', 'entry = "main\\n"'),
    "params": ("tiles = ", '"tiles\\n" = '),
    "fact": ("[fact.tile]", '[fact."tile\\n"]'),
    "ring": ("[ring.work]", '[ring."work\\n"]'),
    "smem": ("[smem.scratch]", '[smem."scratch\\n"]'),
    "barrier": ("[barrier.combine]", '[barrier."combine\\n"]'),
    "export": ("[export.acc]", '[export."acc\\n"]'),
}


@pytest.mark.parametrize("clause", sorted(NEWLINE_NAMES))
def test_identifier_with_a_trailing_newline_is_c_schema(clause):
    old, new = NEWLINE_NAMES[clause]
    with pytest.raises(Rejected) as e:
        parse_contract_text(_c(old, new), "c.contract.toml")
    assert e.value.codes[0] in ("C-SCHEMA", "C-EXPR") and "\\n" in str(e.value.diagnostics[0].message), e.value


@pytest.mark.parametrize("old,new", [('name = "toy"', 'name = "toy\\n"'), ('name = "prod"', 'name = "prod\\n"'),
                                     ('launch_args = ["blocks"]', 'launch_args = ["blocks\\n"]')])
def test_kernel_file_name_with_a_trailing_newline_is_c_schema(toy, old, new):
    text = (TOY / "toy.kernel.toml").read_text()
    assert text.count(old) == 1
    e = rejected(parse_kernel_text, text.replace(old, new), "k.toml", toy.packages)
    assert e.codes == ["C-SCHEMA"], e


def test_package_names_with_a_trailing_newline_are_p_package():
    from pipelink.linker.package_io import _IDENT, _SAFE_NAME, _TOOLKIT, _safe_rel

    assert not _safe_rel("params.h\n") and not _SAFE_NAME.match("x.o\n")
    assert not _IDENT.match("acc\n") and not _TOOLKIT.match("13.0\n")
    assert _safe_rel("a/params.h") and _IDENT.match("acc") and _TOOLKIT.match("13.0")


# ---- class: a workspace size no launch can size once the facts are known (found by hand) -----------
# The contract's parser samples a size's facts like any other name; the facts the kernel links with
# were never put in: `tiles // (t - 8)` with t = 8, `t * 4` with an i32 t = -3, `5120 // flag` with a
# false bool fact linked, and every launch then failed with R-WORKSPACE.

SINK_WS = '\n[fact.t]\ntype = "i32"\naccept = {min = -8, max = 64}\n\n[workspace.w]\nscope = "SCOPE"\nbytes = "SIZE"\n'
WS_SIZES = {
    "division by zero": ("tiles // (t - 8)", 8, "division by zero"),
    "negative": ("t * 4", -3, "is -12"),
    "beyond 2^64": ("grid_x * t * 18446744073709551615", 8, "out of range"),
    "kernel scope": ("t - 9", 8, "is -1"),
}


@pytest.mark.parametrize("case", sorted(WS_SIZES))
def test_workspace_size_the_linked_facts_cannot_size_is_c_expr(packer, toy, case):
    size, t, needle = WS_SIZES[case]
    scope = "kernel" if case == "kernel scope" else "instance"
    sink = packer.variant(toy.sink, toy.sink.contract_text + SINK_WS.replace("SCOPE", scope).replace("SIZE", size),
                          check_object=False)
    text = (TOY / "toy.kernel.toml").read_text() + f'\n[fact.t]\ntype = "i32"\nown = {t}\n'
    comp = packer.compose(text, [toy.producer, toy.consumer, sink], name="ws")
    d = diagnostic(rejected(plan, comp), "C-EXPR")
    assert d.clause == "workspace.w.bytes" and needle in d.message and f"t = {t}" in d.message and d.hint
    assert d.facts[0].origin.startswith(sink.path) and d.facts[1].origin.startswith(comp.file), d.facts
    assert all(f.origin.rsplit(":", 1)[1].isdigit() for f in d.facts)


@pytest.mark.parametrize("size,t", [("tiles // (t - 8)", 9), ("t * 4", 0), ("max(t, 1) * grid_x", -8)])
def test_workspace_sizes_the_linked_facts_can_size_still_plan(packer, toy, size, t):
    sink = packer.variant(toy.sink, toy.sink.contract_text + SINK_WS.replace("SCOPE", "instance").replace("SIZE", size),
                          check_object=False)
    text = (TOY / "toy.kernel.toml").read_text() + f'\n[fact.t]\ntype = "i32"\nown = {t}\n'
    plan(packer.compose(text, [toy.producer, toy.consumer, sink], name="ws_ok"))


# ---- class: an accept range that holds no value (found by hand) -----------------------------------------
# min > max was refused; a range with no multiple of multiple_of in it (min = 1, max = 1, multiple_of = 2)
# accepted nothing too, and every owner's value then failed L-FACT-ACCEPT with a range that looked fine.

@pytest.mark.parametrize("rng", ["{ min = 1, max = 1, multiple_of = 2 }", "{ min = 33, max = 63, multiple_of = 32 }"])
def test_accept_range_without_a_multiple_is_c_schema(rng):
    producer = (TOY / "producer.contract.toml").read_text()
    old = "accept = { min = 32, max = 4096, multiple_of = 32 }"
    d = _contract_rejects(_c(old, f"accept = {rng}", producer), "C-SCHEMA", "accept =")
    assert "no multiple of" in d.message and d.clause == "fact.tile.accept.multiple_of"


@pytest.mark.parametrize("rng", ["{ min = 3, max = 5, multiple_of = 4 }", "{ min = 0, max = 0, multiple_of = 7 }"])
def test_accept_range_with_a_multiple_still_parses(rng):
    producer = (TOY / "producer.contract.toml").read_text()
    parse_contract_text(_c("accept = { min = 32, max = 4096, multiple_of = 32 }", f"accept = {rng}", producer),
                        "c.contract.toml")


# ---- class: an expression or provider nested deeply enough to exhaust Python's recursion (by hand) --------
# Parsing bounded the text's length, not its depth: a tree that parsed was later walked recursively
# (ast.unparse naming a zero divisor, the runtime's exact-division check, evaluation) and raised
# RecursionError there: E-INTERNAL from pack/plan for a zero divisor ~350-475 levels deep, and a
# traceback at every launch for a grid such as "(blocks + 0 + ... + 0) / 1" that the linker wrote.
# A host provider nested deeply (`x = ----...1`) made ast.parse raise MemoryError: E-INTERNAL in pack.

DEEP = {
    "zero divisor": lambda n: "tile // (" + "1+" * n + f"0 - {n})",
    "sum": lambda n: "tile" + " + 0" * n,
    "exact division": lambda n: "(tile" + " + 0" * n + ") / 1",
    "calls": lambda n: "min(" * n + "tile" + ", 1)" * n,
}


@pytest.mark.parametrize("n", [101, 350, 475])
@pytest.mark.parametrize("shape", sorted(DEEP))
def test_deeply_nested_expression_is_c_expr(shape, n):
    d = _contract_rejects(_c("bytes = 2048", f'bytes = "{DEEP[shape](n)}"'), "C-EXPR", "bytes =")
    # Python's own parser refuses more than 200 nested parentheses (a SyntaxError)
    assert "nested too deeply" in d.message or (shape == "calls" and n > 200 and "not an arithmetic" in d.message)


def test_expression_nested_100_levels_still_parses():
    from pipelink.common.expr import evaluate

    assert evaluate("t" + " + 1" * 97, {"t": 1}) == 98


@pytest.mark.parametrize("n", [101, 400])
def test_deeply_nested_grid_is_c_expr(toy, n):
    text = (TOY / "toy.kernel.toml").read_text().replace('grid = ["blocks", 1, 1]',
                                                         f'grid = ["(blocks{" + 0" * n}) / 1", 1, 1]')
    e = rejected(parse_kernel_text, text, "k.kernel.toml", toy.packages)
    d = diagnostic(e, "C-EXPR")
    assert "nested too deeply" in d.message and d.clause == "kernel.grid" and d.hint


@pytest.mark.parametrize("source", ["x = " + "-" * 100000 + "1", "x = " + "1+" * 100000 + "1",
                                    "x = " + "a." * 100000 + "b"])
def test_deeply_nested_host_provider_is_p_host(tmp_path, source):
    from types import SimpleNamespace

    from pipelink.linker.package import read_host_provider

    (tmp_path / "p_host.py").write_text("def provide(lent, facts, host):\n    return {}\n" + source + "\n")
    host = SimpleNamespace(provider="p_host.py", origin="c.toml:3")
    contract = SimpleNamespace(host=host, file=str(tmp_path / "c.toml"))
    e = rejected(read_host_provider, contract, tmp_path)
    assert e.codes == ["P-HOST"] and e.diagnostics[0].hint


def test_tile_with_more_than_eight_extents_is_c_schema():
    # limits.py multiplies a tile's extents into one expression: with ~100 of them it passed the
    # depth bound no more, and the register limit went unchecked.
    d = _contract_rejects(_c("shape = [32, 4]", "shape = [" + "1, " * 8 + "32, 4]"), "C-SCHEMA", "shape =")
    assert "at most 8" in d.message


def test_register_limit_of_a_tile_of_deep_extents_is_still_checked():
    from pipelink.linker.limits import check_limits

    deep = '"' + "32" + " + 0" * 95 + '"'  # 97 levels: within the bound a contract's expression may use
    c = parse_contract_text(_c("shape = [32, 4]", f"shape = [{', '.join([deep] * 7)}, 4]"), "c.contract.toml")
    e = rejected(check_limits, c)
    assert e.codes == ["P-LIMIT"] and "registers of a thread" in str(e)


# ---- class: a size over many facts made `pack` run for hours (found by hand) ------------------------------
# P-LIMIT evaluates a size at every corner of what the contract accepts: past 4,096 combinations only
# each fact's least and greatest value, but still all 2^n of those: 18 facts in one expression took
# minutes, 30 would take days. Now at most 4,096 evaluations per size, the all-least and
# all-greatest corners and each fact alone at its other end first.

@pytest.mark.parametrize("n,over", [(30, False), (30, True), (13, True)])
def test_limits_of_a_size_over_many_facts_are_bounded(monkeypatch, n, over):
    from pipelink.linker import limits

    calls = []

    def counting(text, env):
        calls.append(1)
        return limits_evaluate(text, env)

    limits_evaluate = limits.evaluate
    monkeypatch.setattr(limits, "evaluate", counting)
    hi = 20000 if over else 64
    text = LIB + "".join(f"[fact.f{i}]\naccept = {{ min = 1, max = {hi} }}\n" for i in range(n))
    text += '[smem.s]\nbytes = "' + " + ".join(f"f{i}" for i in range(n)) + '"\n'
    c = parse_contract_text(text.replace("[fact.tile]\naccept = [256]\n", ""), "c.contract.toml")
    if over:  # the all-greatest corner is always tried: n * 20000 B is over the shared memory
        assert rejected(limits.check_limits, c).codes == ["P-LIMIT"]
    else:
        limits.check_limits(c)
    assert len(calls) <= 4096


# ---- class: regular expressions that backtracked exponentially or cubically on contract text (by hand) ----
# A callable signature with a run of n `*` and no match split the run 2^n ways (22 stars: 5 s; the
# length bound was checked after the match); LineIndex's table-header pattern was cubic in a line of
# `[` and spaces with no `]`, which TOML allows inside a multi-line string (2,000 spaces: 20 s).

@pytest.mark.parametrize("sig", ["void(int" + "*" * 40 + "!)", "void(int" + "*" * 990 + "!)", "v(" + "*" * 5000 + ")"])
def test_callable_signature_of_many_stars_is_c_schema_at_once(sig):
    import time

    t0 = time.time()
    d = _contract_rejects(LIB + f"[callable.import.f]\nsignature = {json.dumps(sig)}\n", "C-SCHEMA", "signature =")
    assert "C function type" in d.message and time.time() - t0 < 10


def test_pointer_signatures_still_parse():
    c = parse_contract_text(LIB + '[callable.import.f]\nsignature = "void(int**const*, const char* const&)"\n',
                            "c.contract.toml")
    assert c.callables[0].signature == "void(int**const*,const char*const&)"


@pytest.mark.parametrize("line", ["[" + " " * 20000 + "a", "[[" + " \t" * 10000, "  [" + " " * 20000 + "[x"])
def test_bracket_line_in_a_multiline_string_is_read_at_once(line):
    import time

    t0 = time.time()
    text = _c("[params]\n", f'note = """\n{line}\n"""\n[params]\n')  # an unknown key: C-SCHEMA at its line
    d = _contract_rejects(text, "C-SCHEMA", "note =")
    assert "not a known field" in d.message and time.time() - t0 < 10


# ---- class: a non-ASCII name in an expression read as another name (found by hand) -----------------------
# Python normalises identifiers (NFKC): "ｔile * 4" (a fullwidth t) parsed as tile * 4 and "ﬁle" as file,
# so a name no [fact.X] could declare (facts are C identifiers) silently read another fact.

@pytest.mark.parametrize("expr", ["ｔile * 4", "tile * ４", "ﬁle + tile", "tïle * 4"])
def test_non_ascii_expression_is_c_expr(expr):
    d = _contract_rejects(_c('stage_bytes = "tile * 4"', f'stage_bytes = "{expr}"'), "C-EXPR", "stage_bytes =")
    assert "non-ASCII" in d.message


def test_non_ascii_grid_is_c_expr(toy):
    text = (TOY / "toy.kernel.toml").read_text().replace('grid = ["blocks", 1, 1]', 'grid = ["ｂlocks", 1, 1]')
    d = diagnostic(rejected(parse_kernel_text, text, "k.kernel.toml", toy.packages), "C-EXPR")
    assert "non-ASCII" in d.message and d.clause == "kernel.grid"
