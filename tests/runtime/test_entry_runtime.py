"""The generic parameter checks of pipelink.runtime (plan_launch / Kernel.launch_with / open) and
the entry helpers of pipelink.runtime.entry: every bad value is a LaunchError with an R-* code, never a
struct/ctypes/Python traceback and never a silent coercion. No GPU, no torch (hypothesis drives
the helpers with values of every kind)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conftest  # noqa: F401  (tools/ on sys.path)
from pipelink.runtime.entry import expect_cubin, expect_stream, flag, integer, kernel_file, optional_dir, real, refuse_unused
from helpers.manifest_fakes import manifest
from pipelink.runtime import Kernel, LaunchError, Manifest, plan_launch

np = pytest.importorskip("numpy")


M = manifest([("p", "ptr"), ("u", "u32"), ("i", "i32"), ("f", "f32"), ("w", "u64")])
GOOD = {"p": 0x1000, "u": 1, "i": -1, "f": 0.5, "w": 2}


def refused(fn, *a, **kw) -> LaunchError:
    try:
        fn(*a, **kw)
    except LaunchError as e:
        assert e.code.startswith("R-") and e.diagnostics[0].hint.strip(), str(e)
        return e
    raise AssertionError("accepted")


@pytest.mark.parametrize("name, value", [
    ("u", 2**32), ("u", -1), ("i", 2**31), ("i", -(2**31) - 1), ("w", 2**64), ("u", 1.0), ("u", True),
    ("u", np.bool_(True)), ("u", "1"), ("u", None), ("u", [1]), ("f", float("nan")), ("f", np.float32("nan")),
    ("f", 1e39), ("f", 10**400), ("f", "1.5"), ("f", b"1"), ("f", True), ("f", np.bool_(False)), ("f", 1 + 1j),
    ("f", None), ("p", True), ("p", np.bool_(True)), ("p", 1.5), ("p", "0x1000"), ("p", -8), ("p", 2**64),
    ("p", object()), ("p", SimpleNamespace(__cuda_array_interface__={"data": (None, False), "shape": (0,),
                                                                     "typestr": "<f4", "version": 3}))])
def test_bad_parameter_values_are_r_param(name, value):
    e = refused(plan_launch, M, {**GOOD, name: value})
    assert e.code == "R-PARAM" and repr(name) in str(e)


def test_good_parameters_numpy_and_inf():
    p = plan_launch(M, {**GOOD, "u": np.uint32(7), "i": np.int64(-5), "f": np.float32(2.0)})
    assert (p.values["u"], p.values["i"], p.values["f"]) == (7, -5, 2.0)
    assert plan_launch(M, {**GOOD, "f": float("inf")}).values["f"] == math.inf  # inf is a float32 value


@pytest.mark.parametrize("grid", [[True], (1, False), [1.0], "1", [1, 2, 3, 4], [0], [2**31]])
def test_bad_explicit_grids(grid):
    assert refused(plan_launch, M, GOOD, grid=grid).code in ("R-PARAM", "R-SHAPE")


@pytest.mark.parametrize("stream", [1.5, True, np.bool_(False), "0", b"0", -1, 2**64])
def test_bad_stream_handles(stream):
    k = SimpleNamespace(device=0)
    assert refused(Kernel._stream_handle, k, stream).code == "R-PARAM"
    assert refused(expect_stream, stream).code == "R-PARAM"


def test_good_stream_handles():
    k = SimpleNamespace(device=0)
    assert Kernel._stream_handle(k, 7) == 7 and Kernel._stream_handle(k, np.uint64(9)) == 9
    for s in (None, 0, 7, np.uint64(9), SimpleNamespace(cuda_stream=5), SimpleNamespace(__cuda_stream__=lambda: (0, 1))):
        expect_stream(s)


ANY = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                st.text(max_size=4), st.binary(max_size=4), st.complex_numbers(),
                st.lists(st.integers(), max_size=2), st.integers(-2**70, 2**70).map(np.int64 if False else int),
                st.sampled_from([np.int64(3), np.int32(-3), np.uint64(2**63), np.float32(1.5), np.float64(-0.0),
                                 np.float16(np.inf), np.bool_(True), np.array([1, 2]), np.array(3.0), object(),
                                 Path("x"), math.pi]))


@settings(max_examples=400, deadline=None)
@given(ANY)
def test_integer_takes_ints_only(v):
    try:
        i = integer("n", v, -5, 2**31 - 1)
    except LaunchError as e:
        assert e.code == "R-PARAM" and e.hint
        assert (isinstance(v, (bool, np.bool_, float, str, bytes, complex, list, type(None), np.floating,
                               np.ndarray, Path, object)) or not -5 <= v <= 2**31 - 1)
        return
    assert type(i) is int and -5 <= i <= 2**31 - 1 and i == v and not isinstance(v, (bool, float, np.bool_))


@settings(max_examples=400, deadline=None)
@given(ANY, st.booleans())
def test_real_takes_finite_float32_numbers_only(v, positive):
    try:
        f = real("x", v, positive=positive)
    except LaunchError as e:
        assert e.code == "R-PARAM" and e.hint
        return
    assert type(f) is float and math.isfinite(f) and abs(f) <= 3.4028234663852886e38
    assert not isinstance(v, (bool, np.bool_, str, bytes, complex)) and (f > 0 or not positive)
    assert f == 0 or abs(f) >= 2.0**-126


@settings(max_examples=200, deadline=None)
@given(ANY)
def test_flag_and_optional_dir_take_their_types_or_are_r_param(v):
    try:
        assert flag("c", v) is bool(v) and isinstance(v, (bool, np.bool_))
    except LaunchError as e:
        assert e.code == "R-PARAM" and not isinstance(v, (bool, np.bool_))
    try:
        d = optional_dir("kernel_dir", v)
        assert d is None if v is None else isinstance(d, Path) and isinstance(v, (str, Path)) and str(v)
    except LaunchError as e:
        assert e.code == "R-PARAM"


def test_refuse_unused_names_the_reader():
    refuse_unused("variant 'full'", {"window": None}, {"window": "variant 'sliding'"})
    e = refused(refuse_unused, "variant 'full'", {"window": 0}, {"window": "variant 'sliding'"})
    assert e.code == "R-PARAM" and "window=" in str(e) and "sliding" in e.hint


# ---- a damaged manifest is R-MANIFEST, whatever the damage (tests/fuzz/manifest.py found these) ----

_GOOD = {"format": 1, "kernel": "k", "block": [32, 1, 1], "grid": ["1", "1", "1"],
         "params": {"size": 8, "by_name": {"p": "ptr"}, "fields": [{"instance": "a", "name": "p", "type": "ptr", "offset": 0}]}}


@pytest.mark.parametrize("edit", [
    lambda d: d.update(params=[1, 2]),                        # a container of another kind
    lambda d: d["params"].update(by_name=["x"]),
    lambda d: d["params"].update(fields=[7]),
    lambda d: d.update(facts=[1]),
    lambda d: d.update(host="h.py"),
    lambda d: d.update(workspaces={"a": 1}),
    lambda d: d.update(grid={"x": 1}),
    lambda d: d.update(block=[32.5, 1, 1]),                   # a number of another type
    lambda d: d.update(block=[True, 1, 1]),
    lambda d: d.update(kernel={"name": "k"}),
    lambda d: d["params"].update(size=2**64),                 # beyond a parameter block
    lambda d: d.update(dynamic_smem=2**40),
    lambda d: d.update(workspaces=[{"param": "@ws:a.x", "instance": "a", "name": "x", "bytes": "1", "zero": True,
                                    "align": float("inf")}]),
], ids=["params-list", "by_name-list", "field-int", "facts-list", "host-str", "workspaces-dict", "grid-dict",
        "block-float", "block-bool", "kernel-dict", "size-2^64", "smem-2^40", "align-inf"])
def test_damaged_manifest_is_r_manifest(edit):
    import copy

    from pipelink.runtime.launch_error import LaunchError
    from pipelink.runtime.manifest import Manifest

    Manifest.from_dict(copy.deepcopy(_GOOD))  # the undamaged one reads
    d = copy.deepcopy(_GOOD)
    edit(d)
    with pytest.raises(LaunchError) as e:
        Manifest.from_dict(d, "k.manifest.json")
    assert e.value.code == "R-MANIFEST" and e.value.hint


# ---- kernel paths: a probe that raises is a coded refusal (kernel_dir= / $PIPELINK_*_DIR) ----

class _FsPath:
    def __init__(self, v):
        self.v = v

    def __fspath__(self):
        return self.v


@pytest.mark.parametrize("v", [_FsPath(b"/tmp"), _FsPath(1), _FsPath(None), _FsPath(""), "/tmp/a\0b", b"/tmp", 3])
def test_optional_dir_refuses_odd_paths(v):  # _FsPath(1) was a TypeError from os.fspath
    assert refused(optional_dir, "kernel_dir", v).code == "R-PARAM"


def _probe(tmp_path, kind):
    (tmp_path / "file").write_bytes(b"x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    return {"long": tmp_path / ("a" * 300) / "k.cubin", "deep": Path("/" + "a/" * 3000) / "k.cubin",
            "loop": tmp_path / "loop" / "k.cubin", "self_loop": tmp_path / "loop", "nul": tmp_path / "a\0b",
            "under_file": tmp_path / "file" / "k.cubin", "missing": tmp_path / "k.cubin", "dir": tmp_path}[kind]


@pytest.mark.parametrize("kind", ["long", "deep", "loop", "self_loop", "nul", "under_file", "missing", "dir"])
def test_kernel_file_refuses_what_is_no_file(tmp_path, kind):  # long/deep: OSError; loop: RuntimeError (resolve)
    e = refused(kernel_file, _probe(tmp_path, kind), hint="build it")
    assert e.code == "R-MANIFEST" and "no kernel at" in str(e) and e.hint == "build it"
    (tmp_path / "k.cubin").write_bytes(b"\x7fELF")
    assert kernel_file(tmp_path / "k.cubin") == (tmp_path / "k.cubin").resolve()


@pytest.mark.parametrize("v", [3, None, 1.5, ["k.cubin"]])
def test_expect_cubin_refuses_a_non_path(v):  # 3 was open()'s TypeError
    assert refused(expect_cubin, v).code == "R-PARAM"
