"""Runtime: manifest -> validated, packed launch; and (on a GPU) the toy kernel's results.

The first part needs no GPU, no driver and no torch: parameter packing is checked against
`generate.param_layout` (and a ctypes model of the C struct), validation and grid errors are
checked on plain manifests with fake tensors. The second part is marked `requires_gpu`
(conftest.py skips it, with the reason, when cuInit fails or no device is visible); it
launches the toy, linked and control, on fresh random inputs with NaN-poisoned outputs.
GPU tests read the kernels Bazel built (the GPU machine has no z3, so nothing is linked there):
`tools/bazel build //examples/toy:toy //kernels:gemm_swiglu //kernels:gemm_swiglu_wgmma
--output_groups=+control`, linked and control cubins from bazel-bin ($PIPELINK_BAZEL_BIN
overrides it). Without a Bazel-built toy they link it here (needs z3).
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROOT  # conftest also puts tools/ on sys.path
try:
    from pipelink.linker.generate import param_layout
except ImportError:  # pipelink.linker.generate imports the solver, hence z3, which the GPU machine lacks
    param_layout = None
from pipelink.runtime import (LaunchError, Manifest, Packer, coerce_params, default_manifest_path,
                              expect_tensor, grid_dims, pack_params, plan_launch)

CT = {"ptr": ctypes.c_uint64, "u64": ctypes.c_uint64, "u32": ctypes.c_uint32, "i32": ctypes.c_int32,
      "f32": ctypes.c_float}
FMT = {"ptr": "<Q", "u64": "<Q", "u32": "<I", "i32": "<i", "f32": "<f"}


# ---- helpers ---------------------------------------------------------------------------------

def fake_checked(instances: list[tuple[str, list[tuple[str, str]]]]):
    """The part of `Checked` that param_layout reads: comp.instances[i].name / .contract.params."""
    if param_layout is None:
        pytest.skip("pipelink.linker.generate is not importable here (no z3); the CPU suite runs this")
    insts = tuple(SimpleNamespace(name=n, contract=SimpleNamespace(params=tuple(ps))) for n, ps in instances)
    return SimpleNamespace(comp=SimpleNamespace(instances=insts))


def manifest_dict(instances, *, grid=("1", "1", "1"), facts=None, **extra) -> dict:
    """A manifest's params section as link.make_manifest writes it, from param_layout (or, where
    pipelink.linker.generate cannot be imported, from the ctypes model that test_packing_* checks it against)."""
    if param_layout is not None:
        layout = param_layout(fake_checked(instances))
        size, fields = layout.size, [(f.instance, f.name, f.type, f.offset) for f in layout.fields]
    else:
        C = c_struct(instances)
        size = ctypes.sizeof(C)
        fields = [(i, n, t, getattr(C, i).offset + getattr(_member_type(C, i), n).offset)
                  for i, ps in instances for n, t in ps]
    by_name = {n: t for _, ps in instances for n, t in ps}
    d = {"format": 1, "kernel": "k", "entry": "k", "arch": "sm_90a", "block": [128, 1, 1], "cluster": [1, 1, 1],
         "grid": list(grid), "dynamic_smem": 0,
         "params": {"size": size, "by_name": by_name,
                    "fields": [{"instance": i, "name": n, "type": t, "offset": o} for i, n, t, o in fields]},
         "facts": dict(facts or {})}
    d.update(extra)
    return d


def c_struct(instances):
    """ctypes model of `struct PlKernelParams { PlParams_<inst> <inst>; ... }` (the C oracle)."""
    members = []
    for name, ps in instances:
        if ps:
            members.append((name, type(f"PlParams_{name}", (ctypes.Structure,),
                                       {"_fields_": [(n, CT[t]) for n, t in ps]})))
    return type("PlKernelParams", (ctypes.Structure,), {"_fields_": members})


class FakeTensor:
    """Enough of torch.Tensor for the runtime's checks."""

    def __init__(self, ptr=0x7F0000000000, *, cuda=True, index=0, contiguous=True, shape=(4, 4),
                 dtype="bf16", strides=None):
        self._ptr, self.is_cuda, self._contig = ptr, cuda, contiguous
        self.device = SimpleNamespace(type="cuda" if cuda else "cpu", index=index if cuda else None)
        self.shape, self.dtype = tuple(shape), dtype
        self._strides = strides or tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))

    def data_ptr(self):
        return self._ptr

    def is_contiguous(self):
        return self._contig

    def stride(self):
        return self._strides


MIXED = [
    ("a", [("n", "u32"), ("x", "ptr"), ("s", "f32")]),  # u32 then ptr: 4 bytes of padding
    ("b", [("n", "u32")]),                              # a 4-aligned struct after an 8-aligned one
    ("none", []),                                       # an instance without params takes no room
    ("c", [("q", "i32"), ("x", "ptr"), ("big", "u64"), ("s", "f32")]),
    ("d", [("q", "i32")]),
]
TOYLIKE = [(i, [("in", "ptr"), ("out", "ptr"), ("tiles", "u32")]) for i in ("prod", "cons", "out")]
GSW = [(i, [("x", "ptr"), ("w", "ptr"), ("out", "ptr"), ("m", "u32"), ("n", "u32"), ("k", "u32")])
       for i in ("load", "main", "epi")]


def err(fn, *a, **kw) -> LaunchError:
    try:
        fn(*a, **kw)
    except LaunchError as e:
        return e
    pytest.fail(f"{getattr(fn, '__name__', fn)} accepted its input; expected a LaunchError", pytrace=False)


# ---- packing (no GPU) ----------------------------------------------------------------------------

@pytest.mark.parametrize("instances", [MIXED, TOYLIKE, GSW], ids=["mixed", "toy", "gemm_swiglu"])
def test_packing_matches_param_layout_and_c(instances):
    m = Manifest.from_dict(manifest_dict(instances))
    C = c_struct(instances)
    assert m.param_size == ctypes.sizeof(C)
    values = {"n": 0xDEADBEEF, "x": 0x7F00_1234_5678, "s": -1.5, "q": -7, "big": 2**64 - 3,
              "in": 0x7F00_0000_1000, "out": 0x7F00_0000_2000, "tiles": 37, "w": 0x7F00_0000_3000,
              "m": 256, "k": 4096}
    values = {n: values[n] for n in m.param_types}
    data = pack_params(m, values)
    assert len(data) == m.param_size
    # every instance's field holds the one kernel-wide value, at param_layout's offset ...
    for f in param_layout(fake_checked(instances)).fields:
        (got,) = struct.unpack_from(FMT[f.type], data, f.offset)
        assert got == values[f.name], f
        # ... which is where a C compiler puts it
        assert f.offset == getattr(C, f.instance).offset + getattr(_member_type(C, f.instance), f.name).offset
    # and the whole block equals the C struct filled member by member (padding zero)
    c = C()
    for inst, ps in instances:
        for n, _ in ps:
            setattr(getattr(c, inst), n, values[n])
    assert data == bytes(c)


def _member_type(C, name):
    return dict(C._fields_)[name]


def test_padding_is_zero_and_size_rounds_to_alignment():
    m = Manifest.from_dict(manifest_dict([("a", [("p", "ptr"), ("n", "u32")])]))
    assert m.param_size == 16  # 8 + 4, rounded up to the struct's 8-byte alignment
    assert pack_params(m, {"p": 2**64 - 1, "n": 1}) == b"\xff" * 8 + b"\x01\0\0\0" + b"\0" * 4


def test_kernel_without_params_gets_a_dummy_word():
    m = Manifest.from_dict(manifest_dict([("a", [])]))
    assert m.param_size == 0 and pack_params(m, {}) == b"\0" * 4


@pytest.mark.parametrize("t,value,packed", [
    ("u32", 2**32 - 1, b"\xff\xff\xff\xff"), ("i32", -(2**31), b"\0\0\0\x80"),
    ("f32", 1, struct.pack("<f", 1.0)), ("f32", float("inf"), struct.pack("<f", float("inf"))),
    ("u64", 2**64 - 1, b"\xff" * 8), ("ptr", 0, b"\0" * 8)])
def test_scalar_edges_pack(t, value, packed):
    m = Manifest.from_dict(manifest_dict([("a", [("v", t)])]))
    data = plan_launch(m, {"v": value}).params
    assert data[:len(packed)] == packed


def test_numpy_scalars_are_ints():
    np = pytest.importorskip("numpy")
    m = Manifest.from_dict(manifest_dict(GSW, grid=("n / block_n", "m / block_m", "1"),
                                         facts={"block_m": 128, "block_n": 64, "block_k": 64}))
    p = plan_launch(m, dict(x=1, w=2, out=3, m=np.int64(256), n=np.uint32(128), k=np.int32(64)))
    assert p.grid == (2, 2, 1)


# ---- validation (no GPU) ----------------------------------------------------------------------

@pytest.fixture
def gsw() -> Manifest:
    return Manifest.from_dict(manifest_dict(GSW, grid=("n / block_n", "m / block_m", "1"),
                                            facts={"block_m": 128, "block_n": 64, "block_k": 64}))


@pytest.fixture
def toy_m() -> Manifest:
    return Manifest.from_dict(manifest_dict(TOYLIKE, grid=("blocks", "1", "1"), facts={"tile": 256}))


def good(**over):
    p = dict(x=FakeTensor(0x1000), w=FakeTensor(0x2000), out=FakeTensor(0x3000), m=256, n=128, k=64)
    p.update(over)
    return p


def test_valid_launch_plan(gsw):
    p = plan_launch(gsw, good(), device=0)
    assert p.grid == (2, 2, 1) and p.block == (128, 1, 1)
    assert p.values["x"] == 0x1000 and p.values["out"] == 0x3000


def test_missing_parameter(gsw):
    params = good()
    del params["k"], params["w"]
    e = err(plan_launch, gsw, params)
    assert e.code == "R-PARAM" and "'w', 'k'" in str(e) and "k: u32" in e.hint


def test_unknown_parameter_suggests(gsw):
    e = err(plan_launch, gsw, good(nn=3))
    assert e.code == "R-PARAM" and "'nn'" in str(e) and "did you mean 'n'" in e.hint


@pytest.mark.parametrize("name,value,needle", [
    ("m", 2**32, "out of range for u32"), ("m", -1, "out of range for u32"),
    ("m", 3.0, "got float"), ("m", True, "got bool"), ("m", "256", "got str"),
    ("m", FakeTensor(), "got FakeTensor"), ("x", 1.5, "(ptr) got float"), ("x", -8, "not a 64-bit address"),
    ("x", None, "(ptr) got NoneType"), ("x", False, "got a bool")])
def test_wrong_parameter_values_are_r_param(gsw, name, value, needle):
    e = err(plan_launch, gsw, good(**{name: value}))
    assert e.code == "R-PARAM" and needle in str(e), str(e)


def test_i32_and_f32_ranges():
    m = Manifest.from_dict(manifest_dict([("a", [("i", "i32"), ("f", "f32")])]))
    assert "out of range for i32" in str(err(plan_launch, m, {"i": 2**31, "f": 0.0}))
    assert "overflows a float" in str(err(plan_launch, m, {"i": 0, "f": 1e39}))
    assert plan_launch(m, {"i": -(2**31), "f": 3.4e38}).values["f"] == 3.4e38


def test_tensor_device_and_layout(gsw):
    e = err(plan_launch, gsw, good(x=FakeTensor(cuda=False)), device=0)
    assert e.code == "R-DEVICE" and "'x'" in str(e) and ".to('cuda:0')" in e.hint
    e = err(plan_launch, gsw, good(w=FakeTensor(index=1)), device=0)
    assert e.code == "R-DEVICE" and "cuda:1" in str(e)
    e = err(plan_launch, gsw, good(out=FakeTensor(contiguous=False)), device=0)
    assert e.code == "R-LAYOUT" and "contiguous" in e.hint


def test_cuda_array_interface(gsw):
    arr = SimpleNamespace(__cuda_array_interface__={"data": (0xABC000, False), "shape": (4, 4),
                                                    "typestr": "<f4", "strides": None, "version": 3})
    assert plan_launch(gsw, good(x=arr)).values["x"] == 0xABC000
    arr.__cuda_array_interface__["strides"] = (4, 16)  # transposed
    assert err(plan_launch, gsw, good(x=arr)).code == "R-LAYOUT"


def test_grid_divisibility_names_the_parameter(gsw):
    e = err(plan_launch, gsw, good(n=100))
    assert e.code == "R-SHAPE"
    text = str(e)
    assert "parameter 'n'" in text and "n = 100" in text and "block_n = 64" in text, text
    assert "n % block_n == 0" in e.hint
    e = err(plan_launch, gsw, good(m=200))
    assert e.code == "R-SHAPE" and "parameter 'm'" in str(e)


def test_grid_zero_and_limits(gsw):
    e = err(plan_launch, gsw, good(m=0))
    assert e.code == "R-SHAPE" and "is 0" in str(e)
    e = err(plan_launch, gsw, good(m=128 * 70000))
    assert e.code == "R-SHAPE" and "65535" in str(e)


def test_floor_and_ceil_div_do_not_need_divisibility():
    m = Manifest.from_dict(manifest_dict([("a", [("n", "u32")])], grid=("ceil_div(n, 64)", "n // 64", "1")))
    assert grid_dims(m, {"n": 200}) == (4, 3, 1)


def test_grid_only_names(toy_m):
    assert toy_m.grid_names == ("blocks",)
    p = plan_launch(toy_m, {"in": 1, "out": 2, "tiles": 3, "blocks": 7})
    assert p.grid == (7, 1, 1)
    e = err(plan_launch, toy_m, {"in": 1, "out": 2, "tiles": 3})
    assert e.code == "R-PARAM" and "'blocks'" in str(e) and "grid sizes: blocks" in e.hint
    # an explicit grid replaces the expressions, so the grid size is not needed
    assert plan_launch(toy_m, {"in": 1, "out": 2, "tiles": 3}, grid=5).grid == (5, 1, 1)
    assert plan_launch(toy_m, {"in": 1, "out": 2, "tiles": 3}, grid=(2, 3)).grid == (2, 3, 1)
    assert err(plan_launch, toy_m, {"in": 1, "out": 2, "tiles": 3}, grid=(0, 1, 1)).code == "R-SHAPE"
    assert err(plan_launch, toy_m, {"in": 1, "out": 2, "tiles": 3}, grid=(1.5,)).code == "R-PARAM"


def test_unmet_requirement_is_r_shape():
    m = Manifest.from_dict(manifest_dict([("a", [("k", "u32")])], facts={"block_k": 64},
                                         requires=["1 - min(k % block_k, 1)", "k"]))
    assert plan_launch(m, {"k": 128}).grid == (1, 1, 1)
    e = err(plan_launch, m, {"k": 100})
    assert e.code == "R-SHAPE" and "requirement" in str(e) and "k = 100" in str(e)
    assert err(plan_launch, m, {"k": 0}).code == "R-SHAPE"


def test_validator_hook_sees_raw_params(gsw):
    seen = []

    def check(kernel, params):
        seen.append(params["x"])
        if params["k"] > 1024:
            raise LaunchError("R-SHAPE", "k too large for this test")

    x = FakeTensor(0x1000)
    plan_launch(gsw, good(x=x), validators=[check])
    assert seen == [x]
    assert err(plan_launch, gsw, good(k=2048), validators=[check]).code == "R-SHAPE"


def test_coerce_does_not_need_grid_names_with_explicit_grid(toy_m):
    v = coerce_params(toy_m, {"in": 1, "out": 2, "tiles": 3}, need_grid_names=False)
    assert v == {"in": 1, "out": 2, "tiles": 3}


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d["params"]["by_name"].update(n="u16"), "unknown type"),
    (lambda d: d["params"]["fields"][1].update(offset=4), "misaligned, overlaps"),
    (lambda d: d["params"]["fields"][0].update(type="u64"), "disagrees with params.by_name"),
    (lambda d: d["params"]["by_name"].update(extra="u32"), "have no field"),
    (lambda d: d.update(format=99), "format 99"),
    (lambda d: d.update(grid=["n / (", "1", "1"]), "not an arithmetic expression"),
    (lambda d: d.update(grid=["x / 64", "1", "1"]), "uses ptr parameter 'x'"),
    # planning's exact-division check unparsed it recursively: a RecursionError at every launch
    (lambda d: d.update(grid=["(n" + " + 0" * 400 + ") / 1", "1", "1"]), "nested too deeply"),
    (lambda d: d.update(requires=["n" + " / 1" * 400]), "nested too deeply"),
    (lambda d: d.update(block=[2048, 1, 1]), "more than 1024 threads"),
    (lambda d: d.update(facts={"n": 3}), "both parameters and facts"),
    (lambda d: d.pop("kernel") and d.pop("entry"), "malformed"),
])
def test_bad_manifests_are_r_manifest(mutate, needle):
    d = manifest_dict([("a", [("n", "u32"), ("x", "ptr")])])
    mutate(d)
    e = err(Manifest.from_dict, d, "bad.json")
    assert e.code == "R-MANIFEST" and needle in str(e), str(e)


def test_manifest_path_defaults_and_bad_files_are_r_manifest(tmp_path):
    assert default_manifest_path("out/toy.cubin") == Path("out/toy.manifest.json")
    assert default_manifest_path("out/toy.control.cubin") == Path("out/toy.manifest.json")
    e = err(Manifest.from_file, tmp_path / "nope.manifest.json")
    assert e.code == "R-MANIFEST" and "manifest_path" in e.hint
    (tmp_path / "bad.json").write_text("{")
    assert err(Manifest.from_file, tmp_path / "bad.json").code == "R-MANIFEST"


def test_launch_error_is_a_diagnostic():
    from pipelink.common.diagnostics import Rejected
    e = LaunchError("R-SHAPE", "m = 3 is not a multiple of 64", hint="pad m")
    assert isinstance(e, Rejected) and e.codes == ["R-SHAPE"]
    assert str(e) == "error R-SHAPE: m = 3 is not a multiple of 64\n  hint: pad m"


def test_expect_tensor():
    t = FakeTensor(0x1000, shape=(128, 64), dtype="bf16")
    expect_tensor("x", t, shape=(128, None), dtype="bf16", device=0, align=16)
    assert err(expect_tensor, "x", t, dtype="f16").code == "R-DTYPE"
    e = err(expect_tensor, "x", t, shape=(64, None))
    assert e.code == "R-SHAPE" and "[128, 64]" in str(e) and "[64, *]" in str(e)
    assert err(expect_tensor, "x", FakeTensor(0x1008), align=16).code == "R-LAYOUT"
    assert err(expect_tensor, "x", FakeTensor(contiguous=False)).code == "R-LAYOUT"
    assert err(expect_tensor, "x", FakeTensor(cuda=False)).code == "R-DEVICE"
    assert err(expect_tensor, "x", FakeTensor(index=2), device=0).code == "R-DEVICE"
    assert err(expect_tensor, "x", 5).code == "R-PARAM"


def test_load_without_a_gpu_is_a_clean_error(tmp_path):
    from conftest import gpu_unavailable_reason
    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is present")
    from pipelink.runtime import Kernel
    (tmp_path / "k.cubin").write_bytes(b"\0" * 16)
    (tmp_path / "k.manifest.json").write_text(json.dumps(manifest_dict(TOYLIKE)))
    e = err(Kernel.load, tmp_path / "k.cubin")
    assert e.code in ("R-DEVICE", "R-CUDA")


# ---- the real toy manifest (links on the CPU: needs nvcc and z3) ------------------------------

def _link_toy(toy, out_dir: Path, control: bool = True) -> dict[str, Path]:
    pytest.importorskip("z3", reason="linking needs z3 (build //examples/toy:toy with Bazel on machines without it)")
    from pipelink.linker.compose import parse_kernel
    from pipelink.linker.link import link, write_outputs
    res = link(parse_kernel(str(toy.kernel), toy.packages), control=control)
    paths = {"linked": out_dir / "toy.cubin", "manifest": out_dir / "toy.manifest.json"}
    if control:
        paths["control"] = out_dir / "toy.control.cubin"
    write_outputs(res, cubin=str(paths["linked"]), manifest=str(paths["manifest"]),
                  control=str(paths["control"]) if control else None)
    return paths


@pytest.fixture(scope="module")
def toy_linked(request, tmp_path_factory):
    pytest.importorskip("z3", reason="linking needs z3")
    return _link_toy(request.getfixturevalue("toy"), tmp_path_factory.mktemp("toy-linked"))


def test_real_toy_manifest_packs_like_the_c_struct(toy_linked):
    m = Manifest.from_file(toy_linked["manifest"])
    assert m.kernel == "toy" and m.grid_names == ("blocks",) and m.facts == {"tile": 256}
    instances = []
    for s in m.slots:
        if not instances or instances[-1][0] != s.instance:
            instances.append((s.instance, []))
        instances[-1][1].append((s.name, s.type))
    C = c_struct(instances)
    assert m.param_size == ctypes.sizeof(C)
    c = C()
    vals = {"in": 0x7F00_0000_1000, "out": 0x7F00_0000_2000, "tiles": 9}
    for inst, ps in instances:
        for n, _ in ps:
            setattr(getattr(c, inst), n, vals[n])
    assert Packer(m).pack(vals) == bytes(c)


# ---- GPU ----------------------------------------------------------------------------------------

BUILD_HINT = "tools/bazel build //examples/toy:toy //kernels:gemm_swiglu //kernels:gemm_swiglu_wgmma --output_groups=+control"


def bazel_kernel(target: str) -> dict | None:
    """The bazel-bin outputs of fused_kernel `target` ("examples/toy:toy"), linked and control;
    None when Bazel has not built them (with --output_groups=+control)."""
    pkg, name = target.split(":")
    base = Path(os.environ.get("PIPELINK_BAZEL_BIN") or ROOT / "bazel-bin") / pkg
    out = {"name": name, "linked": base / f"{name}.cubin", "control": base / f"{name}.control.cubin",
           "manifest": base / f"{name}.manifest.json"}
    return out if all(out[k].exists() for k in ("linked", "control", "manifest")) else None


@pytest.fixture(scope="module")
def toy_builds(request, tmp_path_factory):
    """[(label, cubin, manifest)]: the linked and control toy, from bazel-bin or linked here."""
    c = bazel_kernel("examples/toy:toy")
    if c is None:
        pytest.importorskip("z3", reason=f"no Bazel-built toy and no z3 to link it here: {BUILD_HINT}")
        c = {"name": "toy", **_link_toy(request.getfixturevalue("toy"), tmp_path_factory.mktemp("toy-gpu"))}
    return [(f"{c['name']}:linked", c["linked"], c["manifest"]), (f"{c['name']}:control", c["control"], c["manifest"])]


def toy_reference(x, blocks: int, tiles: int, tile: int):
    """out[b, lane, j] = [j == lane % 4] * sum_t (t+1) * sum_{i % 32 == lane} in[b, t, i] (f64),
    and the same sum of |terms| (for the rounding bound)."""
    import torch
    xv = x.double().view(blocks, tiles, tile // 32, 32)
    w = torch.arange(1, tiles + 1, dtype=torch.float64, device=x.device).view(1, tiles, 1, 1)
    s = (xv * w).sum(dim=(1, 2))
    a = (xv.abs() * w).sum(dim=(1, 2))
    ref = torch.zeros(blocks, 32, 4, dtype=torch.float64, device=x.device)
    mag = torch.zeros_like(ref)
    lanes = torch.arange(32, device=x.device)
    ref[:, lanes, lanes % 4] = s
    mag[:, lanes, lanes % 4] = a
    return ref.view(-1), mag.view(-1)


def check_toy(out, x, blocks, tiles, tile):
    import torch
    ref, mag = toy_reference(x, blocks, tiles, tile)
    got = out.double()
    unwritten = int(torch.isnan(got).sum())
    assert unwritten == 0, f"{unwritten} of {got.numel()} outputs never written"
    n_terms = tiles * tile // 32 + 4
    tol = 2 * n_terms * 2.0**-24 * mag + 1e-30  # recursive f32 summation bound
    bad = (got - ref).abs() > tol
    assert not bool(bad.any()), (f"{int(bad.sum())} outputs off; worst |err| {float((got - ref).abs().max()):.3g}")


@pytest.mark.requires_gpu
@pytest.mark.parametrize("blocks,tiles", [(1, 1), (3, 7), (132, 50), (1000, 3)])
def test_toy_on_gpu(toy_builds, blocks, tiles):
    torch = pytest.importorskip("torch")
    from pipelink.runtime import Kernel
    for label, cubin, manifest in toy_builds:
        k = Kernel.load(cubin, manifest)
        tile = k.manifest.facts["tile"]
        x = torch.randn(blocks * tiles * tile, device="cuda", dtype=torch.float32)
        out = torch.full((blocks * 32 * 4,), float("nan"), device="cuda", dtype=torch.float32)
        p = k(**{"in": x, "out": out, "tiles": tiles, "blocks": blocks})
        assert p.grid == (blocks, 1, 1)
        torch.cuda.synchronize()
        check_toy(out, x, blocks, tiles, tile)


@pytest.mark.requires_gpu
def test_toy_raw_pointers_without_torch(toy_builds):
    """Device pointers as ints, memory through the driver API: no torch involved."""
    np = pytest.importorskip("numpy")
    from cuda.bindings import driver as cu
    from pipelink.runtime import Kernel
    label, cubin, manifest = toy_builds[0]
    k = Kernel.load(cubin, manifest)
    blocks, tiles, tile = 5, 9, k.manifest.facts["tile"]
    rng = np.random.default_rng()
    x = rng.standard_normal(blocks * tiles * tile).astype(np.float32)
    out = np.full(blocks * 128, np.nan, dtype=np.float32)

    def ok(r):
        assert r[0] == cu.CUresult.CUDA_SUCCESS, r
        return r[1] if len(r) > 1 else None

    ctx = ok(cu.cuDevicePrimaryCtxRetain(ok(cu.cuDeviceGet(0))))
    ok(cu.cuCtxPushCurrent(ctx))
    try:
        dx, dout = ok(cu.cuMemAlloc(x.nbytes)), ok(cu.cuMemAlloc(out.nbytes))
        ok(cu.cuMemcpyHtoD(dx, x.ctypes.data, x.nbytes))
        ok(cu.cuMemcpyHtoD(dout, out.ctypes.data, out.nbytes))
        k.launch(stream=0, **{"in": int(dx), "out": int(dout), "tiles": tiles, "blocks": blocks})
        ok(cu.cuCtxSynchronize())
        ok(cu.cuMemcpyDtoH(out.ctypes.data, dout, out.nbytes))
        ok(cu.cuMemFree(dx)), ok(cu.cuMemFree(dout))
    finally:
        cu.cuCtxPopCurrent()
    xv = x.astype(np.float64).reshape(blocks, tiles, tile // 32, 32)
    s = (xv * np.arange(1, tiles + 1).reshape(1, tiles, 1, 1)).sum(axis=(1, 2))
    ref = np.zeros((blocks, 32, 4))
    ref[:, np.arange(32), np.arange(32) % 4] = s
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out.reshape(blocks, 32, 4), ref, rtol=1e-4, atol=1e-3)


@pytest.mark.requires_gpu
def test_toy_graph_capture_and_side_stream(toy_builds):
    torch = pytest.importorskip("torch")
    from pipelink.runtime import Kernel
    label, cubin, manifest = toy_builds[0]
    k = Kernel.load(cubin, manifest)
    blocks, tiles, tile = 64, 12, k.manifest.facts["tile"]
    x = torch.randn(blocks * tiles * tile, device="cuda")
    out = torch.full((blocks * 128,), float("nan"), device="cuda")
    params = {"in": x, "out": out, "tiles": tiles, "blocks": blocks}
    k(**params)  # warm up outside capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        k(**params)  # on the capturing stream (torch's current stream)
    x.copy_(torch.randn_like(x))  # new data, same addresses
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    check_toy(out, x, blocks, tiles, tile)
    # a side stream, passed explicitly
    s = torch.cuda.Stream()
    out.fill_(float("nan"))
    s.wait_stream(torch.cuda.current_stream())
    k(stream=s, **params)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    check_toy(out, x, blocks, tiles, tile)


@pytest.mark.requires_gpu
def test_gpu_refusals(toy_builds):
    torch = pytest.importorskip("torch")
    from pipelink.runtime import Kernel
    label, cubin, manifest = toy_builds[0]
    k = Kernel.load(cubin, manifest)
    assert k.manifest.dynamic_smem > 0 and k.registers > 0
    x = torch.randn(4 * 256 * 2, device="cuda")
    out = torch.empty(4 * 128, device="cuda")
    e = err(k, **{"in": x.cpu(), "out": out, "tiles": 2, "blocks": 4})
    assert e.code == "R-DEVICE"
    e = err(k, **{"in": x.view(2, -1).t(), "out": out, "tiles": 2, "blocks": 4})
    assert e.code == "R-LAYOUT"
    e = err(k, **{"in": x, "out": out, "tiles": 2})
    assert e.code == "R-PARAM"
    bad_manifest = json.loads(Path(manifest).read_text())
    bad_manifest["entry"] = bad_manifest["kernel"] = "not_there"
    e = err(Kernel, Manifest.from_dict(bad_manifest), Path(cubin).read_bytes())
    assert e.code == "R-MANIFEST"
    bad_manifest = json.loads(Path(manifest).read_text())
    bad_manifest["params"]["size"] += 8
    e = err(Kernel, Manifest.from_dict(bad_manifest), Path(cubin).read_bytes())
    assert e.code == "R-MANIFEST" and "parameter block" in str(e)


@pytest.mark.requires_gpu
def test_gemm_swiglu_wrapper():
    cfgs = [c for c in map(bazel_kernel, ("kernels:gemm_swiglu", "kernels:gemm_swiglu_wgmma")) if c]
    if not cfgs:
        pytest.skip(f"no Bazel-built gemm_swiglu kernels: {BUILD_HINT}")
    torch = pytest.importorskip("torch")
    import importlib.util
    spec = importlib.util.spec_from_file_location("gemm_swiglu", ROOT / "kernels/gemm_swiglu/gemm_swiglu.py")
    gs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gs)
    for c in cfgs:
        for cubin in (c["linked"], c["control"]):
            g = gs.GemmSwiglu(cubin, c["manifest"])
            M, N, K = 2 * g.block_m, 2 * g.block_n, 4 * g.block_k
            x = (torch.rand(M, K, device="cuda") * 2 - 1).bfloat16()
            w = ((torch.rand(2 * N, K, device="cuda") * 2 - 1) * (2 / K**0.5)).bfloat16()
            out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            g(x, w, out)
            torch.cuda.synchronize()
            ref = gs.reference(x, w)
            assert int(torch.isnan(out).sum()) == 0
            rel = (out.double() - ref).abs() / (ref.abs() + 1e-2 * ref.pow(2).mean().sqrt())
            assert float(rel.max()) <= 2e-2, (c["name"], cubin, float(rel.max()))
            assert err(g, x[:, : K - 8], w[:, : K - 8]).code in ("R-SHAPE", "R-LAYOUT")
            assert err(g, x[: M - 1], w).code == "R-SHAPE"
            assert err(g, x.float(), w).code == "R-DTYPE"
            assert err(g, x, w, out[:, :-1]).code == "R-SHAPE"
