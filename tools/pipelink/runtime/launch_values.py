"""Reading the caller's launch values: parameters (`pointer`, `scalar`), an explicit grid
(`explicit_grid`), a stream (`stream_handle`) and lent workspace buffers (`lent_buffer`).

Every value is a foreign object: a tensor of any layout, an array with a hand-written
`__cuda_array_interface__`, a numpy scalar, an object whose `__index__`, `__float__`,
`data_ptr` or `__cuda_stream__` raises or returns something that is no number. So each is read
under `foreign`, which turns any exception the object raises into R-PARAM naming the value, and
every address or handle read from one is range-checked before it reaches struct or the driver.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Set
from typing import Any, Callable

from pipelink.runtime.launch_error import LaunchError

FLT_MAX = 3.4028234663852886e38
_U64 = 2**64


def is_tensor(v) -> bool:
    return hasattr(v, "data_ptr") and hasattr(v, "is_cuda") and callable(v.data_ptr)


def dev_index(v) -> int | None:
    dev = getattr(v, "device", None)
    idx = getattr(dev, "index", None)
    return 0 if idx is None and getattr(dev, "type", None) == "cuda" else idx


def is_bool(v) -> bool:
    """A Python or numpy bool (which `operator.index` / `float` would turn into 0 or 1)."""
    return isinstance(v, bool) or getattr(getattr(v, "dtype", None), "kind", None) == "b"


def foreign(what: str, hint: str, fn: Callable, *args, code: str = "R-PARAM") -> Any:
    """fn(*args) over a caller's value; any exception but a LaunchError becomes `code`."""
    try:
        return fn(*args)
    except LaunchError:
        raise
    except Exception as e:  # noqa: BLE001 - the value's own methods may raise anything
        msg = f"{what}: reading the {type(args[-1]).__name__ if args else 'value'} raised {e.__class__.__name__}: {e}"
        raise LaunchError(code, msg if len(msg) <= 300 else msg[:297] + "...", hint=hint) from None


def _address(name: str, p, source: str) -> int:
    """A device address from a tensor, an array interface or an int: an int in 0 .. 2^64-1."""
    if is_bool(p) or isinstance(p, (float, str, bytes)):
        raise LaunchError("R-PARAM", f"parameter {name!r} (ptr): {source} gave {type(p).__name__} {p!r:.40}, not an address",
                          hint="pass a CUDA tensor, an object with __cuda_array_interface__, or a device pointer as an int")
    p = operator.index(p)
    if not 0 <= p < _U64:
        raise LaunchError("R-PARAM", f"parameter {name!r} (ptr) = {p} ({source}) is not a 64-bit address", hint="0 .. 2^64-1")
    return p


def _layout_is_dense(v) -> bool:
    layout = getattr(v, "layout", None)
    return layout is None or str(layout) == "torch.strided"


def _pointer(name: str, v, device: int | None) -> int:
    if is_bool(v):
        raise LaunchError("R-PARAM", f"parameter {name!r} (ptr) got a bool",
                          hint="pass a CUDA tensor or a device pointer (int)")
    if is_tensor(v):
        if not v.is_cuda:
            raise LaunchError("R-DEVICE", f"parameter {name!r}: tensor is on {getattr(v, 'device', 'the host')}, "
                              f"not on cuda:{device if device is not None else '?'}",
                              hint=f"move it first: {name}.to('cuda:{device if device is not None else 0}')")
        idx = dev_index(v)
        if device is not None and idx is not None and idx != device:
            raise LaunchError("R-DEVICE", f"parameter {name!r}: tensor is on cuda:{idx}, the kernel on cuda:{device}",
                              hint=f"load the kernel with device={idx}, or move the tensor to cuda:{device}")
        if not _layout_is_dense(v):  # sparse, mkldnn, ...: no one dense block of memory to point at
            raise LaunchError("R-LAYOUT", f"parameter {name!r}: tensor has layout {v.layout}, not a dense (strided) one",
                              hint=f"pass {name}.to_dense()")
        if hasattr(v, "is_contiguous") and not v.is_contiguous():
            raise LaunchError("R-LAYOUT", f"parameter {name!r}: tensor of shape {tuple(getattr(v, 'shape', ()))} "
                              f"and strides {tuple(v.stride()) if hasattr(v, 'stride') else '?'} is not contiguous",
                              hint=f"pass {name}.contiguous() (the kernel indexes it densely, row-major)")
        return _address(name, v.data_ptr(), "data_ptr()")
    cai = getattr(v, "__cuda_array_interface__", None)
    if cai is not None:
        if not isinstance(cai, Mapping):
            raise LaunchError("R-PARAM", f"parameter {name!r}: __cuda_array_interface__ is a {type(cai).__name__}, "
                              "not a dict", hint="pass a CUDA tensor or an array that implements the interface")
        strides, shape = cai.get("strides"), cai.get("shape", ())
        if strides is not None:
            itemsize = int(cai["typestr"][2:]) if "typestr" in cai else 1
            want, acc = [], itemsize
            for d in reversed(shape):
                want.append(acc)
                acc *= d
            if tuple(strides) != tuple(reversed(want)) and math.prod(shape) > 1:
                raise LaunchError("R-LAYOUT", f"parameter {name!r}: array with strides {tuple(strides)} is not "
                                  "C-contiguous", hint="pass a contiguous copy")
        try:
            data = cai["data"][0]
        except (TypeError, KeyError, IndexError):
            data = None
        if data is None:
            raise LaunchError("R-PARAM", f"parameter {name!r}: __cuda_array_interface__ has no data pointer",
                              hint="pass a non-empty device array")
        return _address(name, data, "__cuda_array_interface__['data']")
    try:
        p = operator.index(v)
    except TypeError:
        raise LaunchError("R-PARAM", f"parameter {name!r} (ptr) got {type(v).__name__}",
                          hint="pass a CUDA tensor, an object with __cuda_array_interface__, or a device "
                               "pointer as an int") from None
    return _address(name, p, "the int given")


def _scalar(name: str, t: str, v, limits: tuple[int, int] | None) -> int | float:
    if is_bool(v) or is_tensor(v) or isinstance(v, (str, bytes)):
        raise LaunchError("R-PARAM", f"parameter {name!r} ({t}) got {type(v).__name__}",
                          hint=f"pass a Python {'number' if t == 'f32' else 'int'}"
                               + (" (for a tensor's size, use e.g. x.shape[0])" if is_tensor(v) else ""))
    if t == "f32":
        try:
            f = float(v)
        except OverflowError:
            f = FLT_MAX * 2
        except (TypeError, ValueError):
            raise LaunchError("R-PARAM", f"parameter {name!r} (f32) got {type(v).__name__}",
                              hint="pass a float") from None
        if f != f or (math.isfinite(f) and abs(f) > FLT_MAX):
            raise LaunchError("R-PARAM", f"parameter {name!r} (f32) = {f!r} is NaN or overflows a float",
                              hint=f"pass a number of magnitude <= {FLT_MAX:.4g} (or inf)")
        return f
    try:
        i = operator.index(v)
    except TypeError:
        raise LaunchError("R-PARAM", f"parameter {name!r} ({t}) got {type(v).__name__} {v!r:.60}",
                          hint="pass an int (floats are not rounded for you)") from None
    lo, hi = limits  # type: ignore[misc]
    if not lo <= i <= hi:
        raise LaunchError("R-PARAM", f"parameter {name!r} = {i} is out of range for {t} [{lo}, {hi}]",
                          hint="the kernel's parameter holds only that range: split the problem or check the value")
    return i


def pointer(name: str, v, device: int | None) -> int:
    return foreign(f"parameter {name!r} (ptr)", "pass a CUDA tensor, an object with __cuda_array_interface__, "
                   "or a device pointer as an int", _pointer, name, v, device)


def scalar(name: str, t: str, v, limits: tuple[int, int] | None) -> int | float:
    return foreign(f"parameter {name!r} ({t})", f"pass a Python {'float' if t == 'f32' else 'int'}",
                   _scalar, name, t, v, limits)


def explicit_grid(grid) -> list[int]:
    """grid=: an int (numpy ints too) or 1 to 3 of them -> [x, y, z] (not yet range-checked)."""
    bad = LaunchError("R-PARAM", f"grid {grid!r:.60} is not 1 to 3 ints",
                      hint="grid=(x, y, z) of ints, or None for the manifest's grid")

    def read(g):
        if is_bool(g) or isinstance(g, (float, str, bytes, Mapping, Set)):  # a dict or set has no order
            raise bad
        try:
            dims = [operator.index(g)]
        except TypeError:
            dims = list(g)
        if not 1 <= len(dims) <= 3 or any(is_bool(x) or isinstance(x, float) for x in dims):
            raise bad
        return [operator.index(x) for x in dims] + [1] * (3 - len(dims))

    try:
        return read(grid)
    except LaunchError:
        raise
    except Exception:  # noqa: BLE001 - not iterable, entries without __index__, or raising their own errors
        raise bad from None


def stream_handle(stream, device: int) -> int:
    """The CUstream handle of a caller's stream (not None): a torch.cuda.Stream, an object with
    __cuda_stream__, a cuda.bindings CUstream or an int; the result is range-checked."""
    if is_bool(stream) or isinstance(stream, (float, str, bytes)) or is_tensor(stream):
        raise LaunchError("R-PARAM", f"stream must be a stream object or handle, not a {type(stream).__name__}",
                          hint="pass a torch.cuda.Stream, an object with __cuda_stream__, or a handle (int)")

    def read(s):
        if hasattr(s, "cuda_stream"):  # torch.cuda.Stream
            idx = getattr(getattr(s, "device", None), "index", None)
            if idx is not None and idx != device:
                raise LaunchError("R-DEVICE", f"stream is on cuda:{idx}, the kernel on cuda:{device}",
                                  hint="launch on a stream of the kernel's device")
            return s.cuda_stream
        if hasattr(s, "__cuda_stream__"):
            return s.__cuda_stream__()[1]
        try:
            return operator.index(s)
        except TypeError:
            return int(s)  # cuda.bindings CUstream

    h = foreign("stream", "pass a torch.cuda.Stream, an object with __cuda_stream__, or a handle", read, stream)
    if is_bool(h) or isinstance(h, (float, str, bytes)) or not hasattr(h, "__index__") or not 0 <= int(h) < _U64:
        raise LaunchError("R-PARAM", f"stream handle {h!r:.40} is not a 64-bit handle",
                          hint="pass torch.cuda.Stream().cuda_stream or None (the current stream)")
    return int(h)


def lent_buffer(name: str, buf, device: int | None) -> tuple[int, int]:
    """A lent workspace: (device pointer, bytes) of ints or a dense contiguous CUDA tensor on
    the kernel's device -> (pointer, bytes), R-WORKSPACE otherwise."""
    def read(b):
        if is_tensor(b):
            if not b.is_cuda:
                raise LaunchError("R-WORKSPACE", f"lent workspace {name!r} is a tensor on "
                                  f"{getattr(b, 'device', 'the host')}, not on a GPU", hint=f"lend a CUDA tensor")
            idx = dev_index(b)
            if device is not None and idx is not None and idx != device:
                raise LaunchError("R-WORKSPACE", f"lent workspace {name!r} is on cuda:{idx}, the kernel on "
                                  f"cuda:{device}", hint="lend a buffer of the kernel's device")
            if not _layout_is_dense(b) or not b.is_contiguous():
                raise LaunchError("R-WORKSPACE", f"lent workspace {name!r}: the tensor is not dense and contiguous",
                                  hint="lend a contiguous tensor or (pointer, bytes)")
            return operator.index(b.data_ptr()), operator.index(b.numel()) * operator.index(b.element_size())
        if isinstance(b, tuple) and len(b) == 2 and not any(is_bool(v) or isinstance(v, float) for v in b):
            return operator.index(b[0]), operator.index(b[1])
        raise LaunchError("R-WORKSPACE", f"lent workspace {name!r} is a {type(b).__name__}, not "
                          "(pointer, bytes) or a CUDA tensor", hint="workspaces={'xs': (ptr, nbytes)}")

    ptr, nbytes = foreign(f"lent workspace {name!r}", "workspaces={'xs': (ptr, nbytes)}", read, buf, code="R-WORKSPACE")
    if not 0 < ptr < _U64 or nbytes < 1:
        raise LaunchError("R-WORKSPACE", f"lent workspace {name!r}: pointer {ptr:#x} / {nbytes} bytes is "
                          "no device buffer", hint="lend a live device allocation and its size in bytes")
    return ptr, nbytes
