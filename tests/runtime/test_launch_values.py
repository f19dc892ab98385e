"""The runtime reads every launch value as a foreign object (pipelink.runtime.launch_values): whatever
a parameter, grid, stream or lent workspace does when read (its data_ptr, __index__,
__float__, __cuda_array_interface__ or __cuda_stream__ raising, or giving back no number, or a
number no address can be) is a LaunchError with an R-* code and a hint, never a ValueError,
RuntimeError or struct.error from inside plan_launch. No GPU: objects that look like tensors.

Found by a hunt beyond test_entry_runtime.py's values: a sparse CUDA tensor as a ptr parameter
raised torch's RuntimeError from is_contiguous(); a data_ptr() past 2^64 reached struct.pack
(struct.error); grid=2.5 or grid=np.int64(2) raised TypeError; a CPU tensor lent as a workspace
was taken as a device pointer (the kernel would have written host memory).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import conftest  # noqa: F401  (tools/ on sys.path)
from helpers.manifest_fakes import manifest
from pipelink.runtime import Kernel, LaunchError, plan_launch

np = pytest.importorskip("numpy")


M = manifest([("p", "ptr"), ("u", "u32"), ("f", "f32")])
GOOD = {"p": 0x1000, "u": 1, "f": 0.5}


def refused(fn, *a, **kw) -> LaunchError:
    try:
        fn(*a, **kw)
    except LaunchError as e:
        assert e.code.startswith("R-") and e.hint.strip(), str(e)
        return e
    raise AssertionError("accepted")


class Raises:
    """Every way of reading it raises something other than TypeError."""
    def __index__(self):
        raise ValueError("no index today")

    def __float__(self):
        raise ZeroDivisionError("no float today")

    def __int__(self):
        raise OverflowError("no int today")


class TensorLike:
    """A CUDA tensor as the runtime sees one; each attribute can be overridden."""
    def __init__(self, ptr=0x40000, layout=None, contiguous=True, cuda=True, index=0, numel=16, raise_in=None):
        self.is_cuda, self._ptr, self._contiguous, self._numel, self._raise = cuda, ptr, contiguous, numel, raise_in
        self.device = SimpleNamespace(type="cuda" if cuda else "cpu", index=index if cuda else None)
        self.shape = (numel,)
        if layout is not None:
            self.layout = layout

    def _maybe(self, what):
        if self._raise == what:
            raise RuntimeError(f"Tensors of this type do not have {what}")

    def data_ptr(self):
        self._maybe("data_ptr")
        return self._ptr

    def is_contiguous(self):
        self._maybe("is_contiguous")
        return self._contiguous

    def stride(self):
        return (1,)

    def numel(self):
        return self._numel

    def element_size(self):
        return 4


def cai(**d):
    base = {"data": (0x2000, False), "shape": (4,), "typestr": "<f4", "version": 3}
    base.update(d)
    return SimpleNamespace(__cuda_array_interface__=base)


@pytest.mark.parametrize("value, code", [
    (TensorLike(layout="torch.sparse_coo", raise_in="is_contiguous"), "R-LAYOUT"),  # a sparse CUDA tensor
    (TensorLike(raise_in="is_contiguous"), "R-PARAM"),
    (TensorLike(raise_in="data_ptr"), "R-PARAM"),
    (TensorLike(ptr="0x1000"), "R-PARAM"),
    (TensorLike(ptr=-1), "R-PARAM"),
    (TensorLike(ptr=2**64), "R-PARAM"),
    (TensorLike(ptr=1.5), "R-PARAM"),
    (SimpleNamespace(__cuda_array_interface__=3), "R-PARAM"),
    (cai(data=(-5, False)), "R-PARAM"),
    (cai(data=(2**70, False)), "R-PARAM"),
    (cai(data=("x", False)), "R-PARAM"),
    (cai(strides=(4,), typestr="<M8[ns]"), "R-PARAM"),
    (cai(strides=(4,), shape=5), "R-PARAM"),
    (Raises(), "R-PARAM"),
])
def test_foreign_pointer_values_are_coded(value, code):
    assert refused(plan_launch, M, {**GOOD, "p": value}).code == code


@pytest.mark.parametrize("name", ["u", "f"])
def test_scalars_that_raise_when_read_are_r_param(name):
    e = refused(plan_launch, M, {**GOOD, name: Raises()})
    assert e.code == "R-PARAM" and repr(name) in str(e)


@pytest.mark.parametrize("params", [None, [("p", 1)], "p", {1: 2}, {**GOOD, 3: 4}])
def test_parameters_not_a_dict_of_names_are_r_param(params):
    assert refused(plan_launch, M, params).code == "R-PARAM"


@pytest.mark.parametrize("grid", [2.5, object(), [Raises()], [2**70], [np.float32(2)], {1: 2}, [[1]], b"1"])
def test_explicit_grid_that_is_not_ints_is_coded(grid):
    assert refused(plan_launch, M, GOOD, grid=grid).code in ("R-PARAM", "R-SHAPE")


@pytest.mark.parametrize("grid, dims", [(np.int64(2), (2, 1, 1)), (np.array([2, 3]), (2, 3, 1)), (7, (7, 1, 1)),
                                        ((np.uint32(2), 1, 4), (2, 1, 4))])
def test_numpy_grids_are_taken(grid, dims):
    assert plan_launch(M, GOOD, grid=grid).grid == dims


@pytest.mark.parametrize("stream", [np.int64(-1), SimpleNamespace(cuda_stream="x"), SimpleNamespace(cuda_stream=-3),
                                    SimpleNamespace(__cuda_stream__=lambda: (0,)),
                                    SimpleNamespace(__cuda_stream__=lambda: (0, "h")), Raises(), object()])
def test_bad_stream_objects_are_r_param(stream):
    assert refused(Kernel._stream_handle, SimpleNamespace(device=0), stream).code == "R-PARAM"


def test_good_stream_objects_still_work():
    k = SimpleNamespace(device=0)
    assert Kernel._stream_handle(k, np.int64(5)) == 5
    assert Kernel._stream_handle(k, SimpleNamespace(cuda_stream=9, device=SimpleNamespace(index=0))) == 9
    assert Kernel._stream_handle(k, SimpleNamespace(__cuda_stream__=lambda: (0, 11))) == 11


WS = manifest([("t", "u32")], [{"param": "@ws:a.xs", "instance": "a", "name": "xs", "bytes": "t * 4", "zero": False,
                                "align": 16, "scope": "kernel"}])


def _lend(buf, device=0):
    return plan_launch(WS, {"t": 4}, device=device, builtins={"num_sms": 1, "resident_ctas": 1},
                       workspace=lambda w, n: 0x7000, lent={"xs": buf})


@pytest.mark.parametrize("buf", [TensorLike(cuda=False), TensorLike(index=1), TensorLike(layout="torch.sparse_coo"),
                                 TensorLike(contiguous=False), TensorLike(raise_in="data_ptr"), (0x1000, 2.5),
                                 (Raises(), 64), (0x1000, np.bool_(True)), (-16, 64), (2**64, 64)])
def test_bad_lent_buffers_are_r_workspace(buf):
    assert refused(_lend, buf).code == "R-WORKSPACE"


def test_lent_buffers_of_numpy_ints_and_tensors_are_taken():
    assert _lend((np.uint64(0x1000), np.int64(64))).values["@ws:a.xs"] == 0x1000
    assert _lend(TensorLike(ptr=0x40000)).values["@ws:a.xs"] == 0x40000
