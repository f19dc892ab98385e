"""Parse pass: contracts and kernel files -> typed data, or a coded diagnostic with file:line.

Every malformed input must come back as `Rejected` (C-SYNTAX / C-SCHEMA / C-EXPR) naming the
file and the line of the offending clause; never as another exception (a traceback for the user).
"""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import diagnostic, rejected
from pipelink.linker.compose import parse_kernel_text
from pipelink.linker.contract import parse_contract, parse_contract_text
from pipelink.common.diagnostics import Rejected
from pipelink.common.expr import ExprError, evaluate, names_in

# The recursive expression strategy has a long repr; hypothesis warns about printing it.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

FULL = '''\
# every clause kind once
[component]
name = "mainloop"
kind = "role"
entry = "run"
arch = "sm_90a"

[params]
a = "ptr"
k = "u32"

[role]
warps = 8
warpgroup_aligned = true
regs = [168, 240]

[fact.block_m]
type = "u32"
own = 128

[fact.tile_k]
accept = [32, 64]

[fact.block_n]
accept = { min = 64, max = 256, multiple_of = 64 }

[smem.scratch]
bytes = "block_m * 4"
align = 128
phase = "epilogue"

[barrier.epi]
threads = "role"

[barrier.pair]
threads = 64

[ring.ab]
side = "consumer"
stage_bytes = "(block_m + 2 * block_n) * tile_k * 2"
depth = [2, 8]
arrivals = 256
peer_arrivals = 1

[export.acc]
shape = ["block_m", "2 * block_n"]
dtype = "f32"
layout = "mma_acc(2,4)"

[import.bias]
shape = [1, "block_n"]
dtype = "bf16"
layout = "blocked"
space = "reg"
scope = "warp"

[callable.export.scale]
signature = "void ( float * ,unsigned )"

[callable.import.log]
signature = "void(unsigned)"
'''


def test_full_contract_parses(tmp_path):
    path = tmp_path / "mainloop.contract.toml"
    path.write_text(FULL)
    c = parse_contract(path)
    assert (c.name, c.kind, c.entry, c.arch) == ("mainloop", "role", "run", "sm_90a")
    assert c.params == (("a", "ptr"), ("k", "u32"))
    assert str(c.param_origin("k")) == f"{path}:10"
    assert c.role.warps == 8 and c.role.warpgroup_aligned and c.role.regs == (168, 240)
    assert str(c.role.origin) == f"{path}:12"
    own, tile_k, block_n = c.facts
    assert own.own == 128 and own.accept is None and str(own.origin) == f"{path}:17"
    assert tile_k.own is None and tile_k.accepts(64) and not tile_k.accepts(128) and tile_k.type == "u32"
    assert block_n.accept_range == (64, 256, 64) and block_n.accepts(192) and not block_n.accepts(96)
    assert not block_n.accepts(320)
    (s,) = c.smem
    assert (s.bytes, s.align, s.phase) == ("block_m * 4", 128, "epilogue")
    assert [(b.name, b.threads) for b in c.barriers] == [("epi", "role"), ("pair", 64)]
    (r,) = c.rings
    assert (r.side, r.depth, r.arrivals, r.peer_arrivals, r.align) == ("consumer", (2, 8), 256, 1, 128)
    exp, imp = c.tensors
    assert exp.direction == "export" and exp.space == "reg" and exp.scope == "role"  # defaults
    assert imp.direction == "import" and imp.shape == (1, "block_n") and imp.scope == "warp"
    scale, log = c.callables
    assert scale.signature == "void(float*,unsigned)"  # whitespace-normalised
    assert log.direction == "import"
    syms = c.handle_symbols()
    assert syms["pl_mainloop__smem__scratch"] == "smem.scratch"
    assert syms["pl_mainloop__fact__tile_k"] == "fact.tile_k"
    assert "pl_mainloop__fact__block_m" not in syms  # owned, not read
    assert all(f"pl_mainloop__ring_{p}__ab" in syms for p in ("depth", "buffer", "full", "empty"))
    assert syms["pl_mainloop__call__log"] == "callable.import.log"
    assert c.defined_symbols() == {"pl_mainloop__entry__run": "component.entry",
                                   "pl_mainloop__import__bias": "import.bias",
                                   "pl_mainloop__callable__scale": "callable.export.scale"}


def test_library_defaults():
    c = parse_contract_text('[component]\nname = "lib"\nkind = "library"\n[barrier.b]\nthreads = 128\n', "lib.toml")
    assert c.kind == "library" and c.role is None and c.entry is None and c.arch == "sm_90a"


def test_toy_contracts_parse():
    from conftest import TOY

    for n in ("producer", "consumer", "sink"):
        assert parse_contract(TOY / f"{n}.contract.toml").name == n


# ---- every schema error: code + file:line --------------------------------------------------
# Each case is a contract whose offending line ends with `#<` (the line the diagnostic must name).

ROLE = '[component]\nname = "c"\nentry = "run"\n[role]\nwarps = 1\n'
LIB = '[component]\nname = "c"\nkind = "library"\n'

BAD = {
    # [component]
    "name-not-ident": ("C-SCHEMA", '[component]\nname = "1abc" #<\nentry = "run"\n[role]\nwarps = 1\n'),
    "name-wrong-type": ("C-SCHEMA", '[component]\nname = 5 #<\nentry = "run"\n[role]\nwarps = 1\n'),
    "kind-unknown": ("C-SCHEMA", '[component]\nname = "c"\nkind = "kernel" #<\n'),
    "entry-missing": ("C-SCHEMA", '[component] #<\nname = "c"\n[role]\nwarps = 1\n'),
    "entry-not-ident": ("C-SCHEMA", '[component]\nname = "c"\nentry = "run-it" #<\n[role]\nwarps = 1\n'),
    "arch-unknown": ("C-SCHEMA", '[component]\nname = "c"\nentry = "run"\narch = "sm_75" #<\n[role]\nwarps = 1\n'),
    "component-unknown-key": ("C-SCHEMA", '[component]\nname = "c"\nentry = "run"\nwarps = 4 #<\n[role]\nwarps = 1\n'),
    # [params]
    "param-type": ("C-SCHEMA", ROLE + '[params]\nm = "u128" #<\n'),
    "param-not-string": ("C-SCHEMA", ROLE + '[params]\nm = 3 #<\n'),
    "param-not-ident": ("C-SCHEMA", ROLE + '[params]\n"a-b" = "u32" #<\n'),
    # [role]
    "warps-zero": ("C-SCHEMA", '[component]\nname = "c"\nentry = "run"\n[role]\nwarps = 0 #<\n'),
    "warps-bool": ("C-SCHEMA", '[component]\nname = "c"\nentry = "run"\n[role]\nwarps = true #<\n'),
    "warps-missing": ("C-SCHEMA", '[component]\nname = "c"\nentry = "run"\n[role] #<\nregs = [24, 64]\n'),
    "regs-range": ("C-SCHEMA", ROLE + 'regs = [300, 400] #<\n'),
    "regs-shape": ("C-SCHEMA", ROLE + 'regs = [24] #<\n'),
    "aligned-type": ("C-SCHEMA", ROLE + 'warpgroup_aligned = "yes" #<\n'),
    "library-with-role": ("C-SCHEMA", LIB + '[role] #<\nwarps = 1\n'),
    # [fact.*]
    "fact-type": ("C-SCHEMA", ROLE + '[fact.t]\ntype = "f32" #<\n'),
    "fact-own-and-accept": ("C-SCHEMA", ROLE + '[fact.t]\nown = 4\naccept = [4] #<\n'),
    "fact-accept-empty": ("C-SCHEMA", ROLE + '[fact.t]\naccept = [] #<\n'),
    "fact-accept-range-key": ("C-SCHEMA", ROLE + '[fact.t]\naccept = { min = 1, step = 2 } #<\n'),
    "fact-not-table": ("C-SCHEMA", ROLE + '[fact]\nt = 5 #<\n'),
    # [smem.*]
    "smem-bytes-missing": ("C-SCHEMA", ROLE + '[smem.s] #<\nalign = 16\n'),
    "smem-bytes-negative": ("C-SCHEMA", ROLE + '[smem.s]\nbytes = -4 #<\n'),
    "smem-bytes-float": ("C-SCHEMA", ROLE + '[smem.s]\nbytes = 1.5 #<\n'),
    "smem-bytes-syntax": ("C-EXPR", ROLE + '[smem.s]\nbytes = "4 *" #<\n'),
    "smem-bytes-power": ("C-EXPR", ROLE + '[smem.s]\nbytes = "x ** 2" #<\n'),
    "smem-bytes-attribute": ("C-EXPR", ROLE + '[smem.s]\nbytes = "os.sep" #<\n'),
    "smem-bytes-arity": ("C-EXPR", ROLE + '[smem.s]\nbytes = "ceil_div(4)" #<\n'),
    "smem-align": ("C-SCHEMA", ROLE + '[smem.s]\nbytes = 64\nalign = 24 #<\n'),
    "smem-unknown-key": ("C-SCHEMA", ROLE + '[smem.s]\nbytes = 64\nalignment = 16 #<\n'),
    "smem-array-of-tables": ("C-SCHEMA", ROLE + '[[smem]] #<\nbytes = 64\n'),
    # [barrier.*]
    "barrier-threads-string": ("C-SCHEMA", ROLE + '[barrier.b]\nthreads = "all" #<\n'),
    "barrier-threads-bool": ("C-SCHEMA", ROLE + '[barrier.b]\nthreads = false #<\n'),
    "library-barrier-role": ("C-SCHEMA", LIB + '[barrier.b] #<\n'),
    # [ring.*]
    "ring-side": ("C-SCHEMA", ROLE + '[ring.r]\nside = "both" #<\nstage_bytes = 64\ndepth = 2\narrivals = 1\n'),
    "ring-depth-order": ("C-SCHEMA", ROLE + '[ring.r]\nside = "producer"\nstage_bytes = 64\ndepth = [4, 2] #<\narrivals = 1\n'),
    "ring-depth-zero": ("C-SCHEMA", ROLE + '[ring.r]\nside = "producer"\nstage_bytes = 64\ndepth = 0 #<\narrivals = 1\n'),
    "ring-arrivals": ("C-SCHEMA", ROLE + '[ring.r]\nside = "producer"\nstage_bytes = 64\ndepth = 2\narrivals = 0 #<\n'),
    "ring-arrivals-missing": ("C-SCHEMA", ROLE + '[ring.r] #<\nside = "producer"\nstage_bytes = 64\ndepth = 2\n'),
    "ring-align": ("C-SCHEMA", ROLE + '[ring.r]\nside = "producer"\nstage_bytes = 64\ndepth = 2\narrivals = 1\nalign = 3 #<\n'),
    "ring-stage-expr": ("C-EXPR", ROLE + '[ring.r]\nside = "producer"\nstage_bytes = "tile +" #<\ndepth = 2\narrivals = 1\n'),
    # [export.*] / [import.*]
    "tensor-shape-empty": ("C-SCHEMA", ROLE + '[export.e]\nshape = [] #<\ndtype = "f32"\nlayout = "blocked"\n'),
    "tensor-shape-float": ("C-SCHEMA", ROLE + '[export.e]\nshape = [1.5] #<\ndtype = "f32"\nlayout = "blocked"\n'),
    "tensor-dtype": ("C-SCHEMA", ROLE + '[import.e]\nshape = [4]\ndtype = "f64" #<\nlayout = "blocked"\n'),
    "tensor-space": ("C-SCHEMA", ROLE + '[import.e]\nshape = [4]\ndtype = "f32"\nlayout = "blocked"\nspace = "tmem" #<\n'),
    "tensor-scope": ("C-SCHEMA", ROLE + '[import.e]\nshape = [4]\ndtype = "f32"\nlayout = "blocked"\nscope = "grid" #<\n'),
    "tensor-layout-missing": ("C-SCHEMA", ROLE + '[import.e] #<\nshape = [4]\ndtype = "f32"\n'),
    # [callable.*]
    "callable-signature-missing": ("C-SCHEMA", ROLE + '[callable.import.f] #<\n'),
    "callable-direction": ("C-SCHEMA", ROLE + '[callable.both.f] #<\nsignature = "void()"\n'),
    # top level
    "unknown-table": ("C-SCHEMA", ROLE + '[smemm.x] #<\nbytes = 4\n'),
    "unknown-top-key": ("C-SCHEMA", 'version = 2 #<\n' + ROLE),
    # TOML itself
    "toml-unquoted": ("C-SYNTAX", '[component]\nname = mainloop #<\n'),
    "toml-duplicate-key": ("C-SYNTAX", '[component]\nname = "a"\nname = "b" #<\n'),
    "toml-duplicate-table": ("C-SYNTAX", ROLE + '[role] #<\nwarps = 2\n'),
}


def _marked_line(text: str) -> int:
    (n,) = [i for i, line in enumerate(text.splitlines(), 1) if line.rstrip().endswith("#<")]
    return n


@pytest.mark.parametrize("case", sorted(BAD))
def test_schema_errors_are_coded_with_file_and_line(tmp_path, case):
    code, text = BAD[case]
    path = tmp_path / f"{case}.contract.toml"
    path.write_text(text)
    rej = rejected(parse_contract, path)  # nothing but Rejected may escape
    assert rej.codes == [code], rej
    d = rej.diagnostics[0]
    where = f"{path}:{_marked_line(text)}"
    assert any(f.origin == where for f in d.facts), f"expected origin {where}:\n{d.render()}"
    assert where in d.render()
    assert d.hint  # every diagnostic says what to do


@pytest.mark.parametrize("text,why", [
    ("[role]\nwarps = 1\n", "component"),           # no [component] at all
    ('[component]\nname = "c"\nentry = "run"\n', "role"),  # a role without [role]
])
def test_missing_required_table_names_the_file(tmp_path, text, why):
    path = tmp_path / "c.contract.toml"
    path.write_text(text)
    d = diagnostic(rejected(parse_contract, path), "C-SCHEMA")
    assert why in d.message and str(path) in d.render()


def test_missing_contract_file_is_e_file(tmp_path):
    d = diagnostic(rejected(parse_contract, tmp_path / "nope.contract.toml"), "E-FILE")
    assert "nope.contract.toml" in d.message


def test_unreadable_contract_is_e_file(tmp_path):
    path = tmp_path / "bin.contract.toml"
    path.write_bytes(b"\xff\xfe[component]\n")
    assert rejected(parse_contract, path).codes == ["E-FILE"]


# ---- kernel files -------------------------------------------------------------------------

KBAD = {
    "kernel-missing": ("C-SCHEMA", '[[instance]]\nname = "a"\npackage = "p"\n'),  # no line to name: the file
    "kernel-name": ("C-SCHEMA", '[kernel]\nname = "my kernel" #<\n[[instance]]\nname = "a"\npackage = "p"\n'),
    "kernel-arch": ("C-SCHEMA", '[kernel]\nname = "k"\narch = "sm_70" #<\n[[instance]]\nname = "a"\npackage = "p"\n'),
    "grid-length": ("C-SCHEMA", '[kernel]\nname = "k"\ngrid = [1, 1, 1, 1] #<\n[[instance]]\nname = "a"\npackage = "p"\n'),
    "grid-expr": ("C-EXPR", '[kernel]\nname = "k"\ngrid = ["n /", 1] #<\n[[instance]]\nname = "a"\npackage = "p"\n'),
    "cluster": ("C-SCHEMA", '[kernel]\nname = "k"\ncluster = [2, "x", 1] #<\n[[instance]]\nname = "a"\npackage = "p"\n'),
    "no-instances": ("C-SCHEMA", '[kernel]\nname = "k"\n'),  # nothing to point at: the file
    "instance-no-package": ("C-SCHEMA", '[kernel]\nname = "k"\n[[instance]] #<\nname = "a"\n'),
    "instance-extra-key": ("C-SCHEMA", '[kernel]\nname = "k"\n[[instance]]\nname = "a"\npackage = "p"\nwarps = 2 #<\n'),
    "instance-bad-name": ("C-SCHEMA", '[kernel]\nname = "k"\n[[instance]] #<\nname = "a.b"\npackage = "p"\n'),
    "bind-not-table": ("C-SCHEMA", 'bind = [1] #<\n[kernel]\nname = "k"\n[[instance]]\nname = "a"\npackage = "p"\n'),
    "bind-missing-export": ("C-SCHEMA", '[kernel]\nname = "k"\n[[instance]]\nname = "a"\npackage = "p"\n[[bind]] #<\nimport = "a.x"\n'),
    "toml": ("C-SYNTAX", '[kernel]\nname = k #<\n'),
}


@pytest.mark.parametrize("case", sorted(KBAD))
def test_kernel_file_errors(case, toy_like_package):
    code, text = KBAD[case]
    rej = rejected(parse_kernel_text, text, "bad.kernel.toml", [toy_like_package])
    assert rej.codes == [code], rej
    d = rej.diagnostics[0]
    lines = [i for i, l in enumerate(text.splitlines(), 1) if l.rstrip().endswith("#<")]
    if not lines:  # a missing table has no line
        assert "bad.kernel.toml" in d.render()
    else:
        assert f"bad.kernel.toml:{lines[0]}" in d.render(), d.render()


@pytest.fixture(scope="module")
def toy_like_package():
    """A package stand-in named `p` for kernel-file parsing (compose reads only .name/.path)."""

    class P:
        name = "p"
        path = "p.plpkg"

    return P()


def test_kernel_file_parses(toy_like_package):
    comp = parse_kernel_text(
        '[kernel]\nname = "k"\narch = "sm_90a"\ngrid = ["n / 64", 2]\ncluster = [2, 1, 1]\n'
        '[[instance]]\nname = "a"\npackage = "p"\n[[instance]]\nname = "b"\npackage = "p"\n'
        '[[bind]]\nimport = "b.x"\nexport = "a.x"\n', "k.kernel.toml", [toy_like_package])
    assert comp.grid == ("n / 64", 2, 1) and comp.cluster == (2, 1, 1)
    assert [(i.name, i.index, str(i.origin)) for i in comp.instances] == [
        ("a", 0, "k.kernel.toml:6"), ("b", 1, "k.kernel.toml:9")]
    assert comp.binds[0].importer == "b.x" and str(comp.binds[0].origin) == "k.kernel.toml:12"
    # The build configuration overrides the file's arch.
    comp = parse_kernel_text('[kernel]\nname = "k"\n[[instance]]\nname = "a"\npackage = "p"\n', "k.kernel.toml",
                             [toy_like_package], arch="sm_100a")
    assert comp.arch == "sm_100a"


# ---- fuzz: a damaged contract is always a coded diagnostic -----------------------------------

_TOML_VALUES = st.one_of(
    st.integers(-2**40, 2**40).map(str), st.booleans().map(lambda b: str(b).lower()),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(string.printable, max_size=12).map(lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"')
                                              .replace("\n", "\\n").replace("\r", "\\r") + '"'),
    st.lists(st.integers(-5, 300), max_size=3).map(str),
    st.just("{ min = 1 }"), st.just("[]"), st.just('["a", 1]'),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=st.integers(0, FULL.count("\n") - 1), value=_TOML_VALUES, raw=st.booleans(), junk=st.text(max_size=8))
def test_fuzzed_contract_never_raises_anything_but_rejected(line, value, raw, junk):
    lines = FULL.splitlines()
    if raw:
        lines[line] = lines[line][: len(lines[line]) // 2] + junk  # cut a line and append junk
    elif "=" in lines[line]:
        key = lines[line].split("=", 1)[0]
        lines[line] = f"{key}= {value}"
    else:
        assume(False)
    try:
        c = parse_contract_text("\n".join(lines) + "\n", "fuzz.contract.toml")
    except Rejected as e:
        assert set(e.codes) <= {"C-SYNTAX", "C-SCHEMA", "C-EXPR"}, e.codes
        for d in e.diagnostics:
            assert any(f.origin.startswith("fuzz.contract.toml") for f in d.facts), d.render()
    else:
        assert c.name  # whatever parsed is a usable contract


# ---- expressions -------------------------------------------------------------------------------

NAMES = ["block_m", "block_n", "k"]


def _exprs():
    leaf = st.one_of(st.integers(0, 10_000).map(str), st.sampled_from(NAMES))

    def extend(inner):
        return st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*", "//", "%"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
            inner.map(lambda e: f"-{e}"),
            inner.map(lambda e: f"+{e}"),
            st.tuples(st.sampled_from(["min", "max"]), st.lists(inner, min_size=2, max_size=3))
            .map(lambda t: f"{t[0]}({', '.join(t[1])})"),
        )

    return st.recursive(leaf, extend, max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(text=_exprs(), env=st.fixed_dictionaries({n: st.integers(-1000, 1000) for n in NAMES}))
def test_evaluate_matches_python(text, env):
    try:
        assert names_in(text) <= set(NAMES)
    except ExprError as e:  # a divisor with no name that is 0: refused when parsed, and zero at every evaluation
        assert "division by zero" in str(e)
        with pytest.raises(ExprError, match="division by zero"):
            evaluate(text, env)
        return
    try:
        want = eval(text, {"__builtins__": {}, "min": min, "max": max}, dict(env))  # noqa: S307 - generated text
    except ZeroDivisionError:
        with pytest.raises(ExprError, match="division by zero"):
            evaluate(text, env)
        return
    assert evaluate(text, env) == want


@given(a=st.integers(-10**6, 10**6), b=st.integers(-10**3, 10**3).filter(bool))
def test_division_is_integer_and_ceil_div_rounds_up(a, b):
    env = {"a": a, "b": b}
    assert evaluate("a / b", env) == evaluate("a // b", env) == a // b
    assert evaluate("ceil_div(a, b)", env) == -(-a // b)
    if b > 0:
        assert evaluate("ceil_div(a, b) * b", env) >= a > evaluate("(ceil_div(a, b) - 1) * b", env)


@settings(max_examples=500, deadline=None)
@given(text=st.text(max_size=40) | st.text("()+-*/%,0123456789abcmnx_ ", max_size=60))
def test_any_text_is_an_expr_error_or_a_value(text):
    env = {n: 7 for n in "abcmnx"}
    try:
        names_in(text)
        v = evaluate(text, env)
    except ExprError:
        return
    assert isinstance(v, int)


@pytest.mark.parametrize("text,msg", [
    ("x", "unknown name 'x'"),
    ("4 // (2 - 2)", "division by zero"),
    ("ceil_div(4, 0)", "division by zero"),
    ("min()", "at least 1 argument"),
    ("ceil_div(4)", "2 arguments"),
    ("ceil_div(1, 2, 3)", "2 arguments"),
    ("1 if 2 else 3", "unsupported syntax"),
    ("2 ** 8", "unsupported syntax"),
    ("__import__('os')", "unsupported syntax"),
    ("1.5 * 2", "unsupported syntax"),
    ("True + 1", "unsupported syntax"),
    ("1" + " + 1" * 5000, "not an arithmetic expression|nested too deeply|too long"),
    ("-" * 100_000 + "1", "not an arithmetic expression|nested too deeply|too long"),
    ("(" * 500 + "1" + ")" * 500, "not an arithmetic expression"),
    ("1\x00", "not an arithmetic expression"),
])
def test_expr_errors(text, msg):
    with pytest.raises(ExprError, match=msg):
        names_in(text)
        evaluate(text, {})
    assert len(str(pytest.raises(ExprError, evaluate, text, {}).value)) < 200  # long input is clipped


def test_expr_values():
    env = {"block_m": 128, "block_n": 64, "block_k": 32}
    assert evaluate("(block_m + 2 * block_n) * block_k * 2", env) == 16384
    assert evaluate("max(block_m, block_n) - min(block_k, 8) % 5", env) == 125
    assert evaluate(64, env) == 64
    assert names_in("(block_m + 2 * block_n) * ceil_div(block_k, 8)") == {"block_m", "block_n", "block_k"}
    with pytest.raises(ExprError):
        evaluate(True, env)


def test_expr_error_in_contract_names_the_line(tmp_path):
    path = tmp_path / "c.contract.toml"
    path.write_text(ROLE + '[smem.s]\nbytes = "block_m *"\n')
    d = diagnostic(rejected(parse_contract, path), "C-EXPR")
    assert re.search(r"smem\.s\.bytes", d.message) and f"{path}:7" in d.render()
