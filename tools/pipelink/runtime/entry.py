"""Argument checks for the kernels' Python entry points (kernels/*/<entry>.py).

Every check raises `pipelink.runtime.LaunchError` with an R-* code and a hint and makes no
CUDA call, so an entry checks all of its arguments before it loads its kernel:

  integer(name, v, lo, hi)        an int (numpy ints too; never a bool, float, str or tensor) in [lo, hi]
  real(name, v, positive=...)     a finite real number that fits a float32 (never a bool, str or tensor)
  flag(name, v)                   True or False (not 0/1, not a string)
  device_index(v), expect_stream(s), tensor_device(t)
  optional_dir(name, v)           None, or a non-empty str / os.PathLike
  expect_tensor(name, t, ...)     a strided tensor on the GPU: dtype, shape, no zero-size dims
                                  (nonempty=), dense row-major, aligned, not a lazy negated/
                                  conjugated view, and no requires_grad while autograd records
  expect_dense(name, t)           a torch tensor with data: strided (not sparse, nested or mkldnn), not meta
  expect_finite(name, t)          R-CONFIG if a float tensor read at load time holds NaN or +-inf
  expect_disjoint(out, t, inputs) R-LAYOUT when the output shares memory with an input
  refuse_unused(what, kwargs, reader)   R-PARAM for a keyword argument the chosen variant ignores
  expect_manifest(path, ...)      R-MANIFEST unless the manifest has the parameters/facts of the
                                  kernel the entry expects (read before the cubin is loaded)
  expect_cubin(path)              R-MANIFEST unless the file is a CUDA ELF (not loaded onto the GPU)
  kernel_file(path, hint)         the cubin path resolved, R-MANIFEST unless it is a file (a probe that
                                  raises -- a name too long, a loop of links, a NUL -- is refused too)
  read_hf_config(path_or_dict)    a Hugging Face config.json (or its directory, or its parsed dict)
                                  as a dict, R-CONFIG for a missing, unreadable (FIFO, device, over
                                  4 MiB, not UTF-8) or non-object file
  is_dir(path)                    Path.is_dir, False where probing the path raises
  hf_field(where, field, v, kind) a config field of transformers' type (int, float, bool, str), else R-CONFIG
"""

from __future__ import annotations

import json
import math
import numbers
import operator
import os
import sys
from pathlib import Path
from typing import Any, Mapping

from pipelink.common.files import MAX_TEXT_BYTES, display, read_regular, why_unreadable
from pipelink.runtime.launch_error import LaunchError
from pipelink.runtime.launch_values import FLT_MAX, dev_index, is_bool, is_tensor
from pipelink.runtime.manifest import Manifest, input_path

FLT_MIN = 2.0 ** -126  # the smallest normal float32; the kernels' fast math flushes subnormals to zero
U32_MAX, I32_MAX = 2**32 - 1, 2**31 - 1


def _show(v) -> str:
    r = repr(v) if not is_tensor(v) else f"a tensor of shape {list(getattr(v, 'shape', ()))}"
    return r if len(r) <= 60 else r[:57] + "..."


def integer(name: str, v, lo: int | None = None, hi: int | None = None, *, code: str = "R-PARAM",
            hint: str = "") -> int:
    if is_bool(v) or isinstance(v, (float, str, bytes)) or is_tensor(v):
        raise LaunchError(code, f"{name} = {_show(v)} ({type(v).__name__}) must be an int",
                          hint=hint or f"pass a Python int{' (int(t) for a tensor)' if is_tensor(v) else ''}; "
                                       "floats and bools are not converted for you")
    try:
        i = operator.index(v)
    except TypeError:
        raise LaunchError(code, f"{name} = {_show(v)} ({type(v).__name__}) must be an int",
                          hint=hint or "pass a Python int") from None
    if (lo is not None and i < lo) or (hi is not None and i > hi):
        rng = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
        raise LaunchError(code, f"{name} = {i} is out of range {rng}", hint=hint or f"pass an int in {rng}")
    return i


def real(name: str, v, *, positive: bool = False, f32: bool = True, hint: str = "") -> float:
    """A finite real number (numpy floats too); `f32`: it must survive the kernel's float32
    (|v| <= FLT_MAX, and not a nonzero below the smallest normal float32)."""
    if is_bool(v) or isinstance(v, (str, bytes)) or is_tensor(v) or not isinstance(v, numbers.Real):
        raise LaunchError("R-PARAM", f"{name} = {_show(v)} ({type(v).__name__}) must be a real number",
                          hint=hint or f"pass a Python float{' (float(t) for a tensor)' if is_tensor(v) else ''}")
    try:
        f = float(v)
    except (OverflowError, TypeError, ValueError):
        f = math.inf if not isinstance(v, numbers.Integral) or v > 0 else -math.inf
    if not math.isfinite(f):
        raise LaunchError("R-PARAM", f"{name} = {_show(v)} is not a finite number", hint=hint or "pass a finite float")
    if f32 and (abs(f) > FLT_MAX or 0 < abs(f) < FLT_MIN):
        raise LaunchError("R-PARAM", f"{name} = {f!r} does not fit a float32 (normal range {FLT_MIN:.3g} .. "
                          f"{FLT_MAX:.4g})", hint=hint or "the kernel computes in float32: pass a value in its range")
    if positive and not f > 0:
        raise LaunchError("R-PARAM", f"{name} = {f!r} must be > 0", hint=hint or "pass a positive number")
    return f


def flag(name: str, v) -> bool:
    if not is_bool(v):
        raise LaunchError("R-PARAM", f"{name} = {_show(v)} ({type(v).__name__}) must be True or False",
                          hint=f"pass {name}=True or {name}=False")
    return bool(v)


def optional_dir(name: str, v) -> Path | None:
    if v is None:
        return None
    try:  # os.fspath and Path raise TypeError for an os.PathLike whose __fspath__ returns bytes or a non-path
        s = os.fspath(v) if isinstance(v, (str, os.PathLike)) else None
        p = Path(s) if isinstance(s, str) and s else None
    except TypeError:
        raise LaunchError("R-PARAM", f"{name} = {_show(v)} is not a str path", hint="pass a str or pathlib.Path") from None
    if p is None:
        raise LaunchError("R-PARAM", f"{name} = {_show(v)} ({type(v).__name__}) is not a directory path",
                          hint=f"pass {name}=None (the default) or the directory the kernel was built into")
    if "\0" in s:
        raise LaunchError("R-PARAM", f"{name} = {_show(v)} has a NUL character: no file system path does",
                          hint=f"pass {name}=None (the default) or the directory the kernel was built into")
    return p


def device_index(v) -> int:
    return integer("device", v, 0, I32_MAX, code="R-DEVICE", hint="device= is a GPU index: 0, 1, ...")


def tensor_device(t) -> int:
    """The GPU index of a tensor that passed expect_tensor (cuda without an index: 0)."""
    idx = dev_index(t)
    return 0 if idx is None else int(idx)


def expect_stream(stream) -> None:
    """None (torch's current stream), a handle (int in 0 .. 2^64-1), or a stream object
    (torch.cuda.Stream, __cuda_stream__, cuda.bindings CUstream); the device is the runtime's check."""
    if stream is None or hasattr(stream, "cuda_stream") or hasattr(stream, "__cuda_stream__"):
        return
    if is_bool(stream) or isinstance(stream, (float, str, bytes)) or is_tensor(stream):
        ok = False
    else:
        try:
            ok = 0 <= int(stream) < 2**64
        except (TypeError, ValueError, OverflowError):
            ok = False
    if not ok:
        raise LaunchError("R-PARAM", f"stream = {_show(stream)} ({type(stream).__name__}) is not a CUDA stream",
                          hint="pass None (torch's current stream), a torch.cuda.Stream, or a stream handle")


def expect_tensor(name: str, t, *, shape=None, dtype=None, device: int | None = None, contiguous: bool = True,
                  align: int = 0, nonempty: bool = False) -> None:
    """Raise R-* if `t` is not what a wrapper needs (None in `shape` = any size). Works on
    torch tensors and on objects shaped like them (data_ptr, is_cuda, dtype, shape, ...)."""
    torch = sys.modules.get("torch")
    if not is_tensor(t):
        raise LaunchError("R-PARAM", f"{name} must be a CUDA tensor, got {type(t).__name__}",
                          hint=f"pass a torch tensor on the GPU (e.g. torch.as_tensor({name}, device='cuda'))")
    try:
        _check_tensor(torch, name, t, shape, dtype, device, contiguous, align, nonempty)
    except LaunchError:
        raise
    except (AttributeError, TypeError, ValueError, RuntimeError, NotImplementedError) as e:
        raise LaunchError("R-PARAM", f"{name} ({type(t).__name__}) cannot be read as a tensor: {e}",
                          hint="pass a plain dense torch tensor on the GPU") from None


def _check_tensor(torch, name, t, shape, dtype, device, contiguous, align, nonempty) -> None:
    if not t.is_cuda:
        raise LaunchError("R-DEVICE", f"{name} is on {getattr(t, 'device', 'the host')}, not on a GPU",
                          hint=f"{name}.cuda()")
    idx = dev_index(t)
    if device is not None and idx != device:
        raise LaunchError("R-DEVICE", f"{name} is on cuda:{idx}, expected cuda:{device}",
                          hint="put all operands on one device")
    _expect_strided(torch, name, t, "")
    if dtype is not None and t.dtype != dtype:
        raise LaunchError("R-DTYPE", f"{name} has dtype {t.dtype}, expected {dtype}", hint=f"{name}.to({dtype})")
    got = tuple(t.shape)
    if shape is not None:
        shape = tuple(shape)
        if len(got) != len(shape) or any(w is not None and g != w for g, w in zip(got, shape)):
            want = "[" + ", ".join("*" if w is None else str(w) for w in shape) + "]"
            raise LaunchError("R-SHAPE", f"{name} has shape {list(got)}, expected {want}",
                              hint="see the entry's docstring for the shapes it takes")
    if nonempty and 0 in got:
        raise LaunchError("R-SHAPE", f"{name} has shape {list(got)}: a zero-size dimension",
                          hint="skip the call for empty inputs")
    if contiguous and not t.is_contiguous():
        raise LaunchError("R-LAYOUT", f"{name} (shape {list(got)}, strides {list(t.stride())}) is not "
                          "contiguous row-major", hint=f"pass {name}.contiguous()")
    for lazy in ("is_neg", "is_conj"):
        if callable(getattr(t, lazy, None)) and getattr(t, lazy)():
            raise LaunchError("R-LAYOUT", f"{name} is a lazy {lazy[3:]}ated view (its memory holds the "
                              "un-negated values)", hint=f"pass {name}.resolve_{lazy[3:]}()")
    if align and t.data_ptr() % align:
        raise LaunchError("R-LAYOUT", f"{name}'s data pointer {t.data_ptr():#x} is not {align}-byte aligned",
                          hint="pass a tensor that starts at an aligned address (e.g. not an odd slice)")
    if getattr(t, "requires_grad", False) is True and torch is not None and torch.is_grad_enabled():
        raise LaunchError("R-PARAM", f"{name} requires grad, but the kernel has no backward: autograd would "
                          "treat its result as a constant", hint=f"call under torch.no_grad() or pass {name}.detach()")


def _expect_strided(torch, name: str, t, hint: str) -> None:
    """R-LAYOUT for a sparse, mkldnn or nested tensor: torch ops on them (min, reshape, shape) raise."""
    layout = getattr(t, "layout", None)
    if torch is not None and layout is not None and layout != torch.strided:
        raise LaunchError("R-LAYOUT", f"{name} has layout {layout}, not a dense (strided) tensor",
                          hint=f"pass {name}.to_dense(){'; ' + hint if hint else ''}")
    if getattr(t, "is_nested", False) is True:
        raise LaunchError("R-LAYOUT", f"{name} is a nested tensor, not a dense (strided) tensor",
                          hint=f"pass one dense tensor{'; ' + hint if hint else ''}")


def expect_dense(name: str, t, hint: str = "") -> None:
    """The check of a torch tensor an entry reads on the host (a prompt, a weight, a checkpoint
    tensor): R-LAYOUT unless strided and not nested, R-DEVICE for a meta tensor (no data)."""
    torch = sys.modules.get("torch")
    _expect_strided(torch, name, t, hint)
    if getattr(t, "is_meta", False) is True:
        raise LaunchError("R-DEVICE", f"{name} is a meta tensor (no data)",
                          hint=hint or "load the tensor's data (onto the CPU or a GPU) first")


def expect_finite(name: str, t, *, code: str = "R-CONFIG", hint: str = "") -> None:
    """`code` if the float tensor `t` (a weight being loaded or converted: a one-time read, never
    per launch) holds NaN or +-inf; the first step would otherwise compute NaN from it."""
    if t.is_floating_point() and not bool(t.isfinite().all()):
        bad = "NaN" if bool(t.isnan().any()) else "inf"
        raise LaunchError(code, f"{name} holds {bad} (shape {list(t.shape)}, {t.dtype})",
                          hint=hint or "the checkpoint is damaged, or its values overflow the dtype asked for: "
                                       "re-download it, or load in a wider dtype")


def _span(t) -> tuple[int | None, int, int] | None:
    """(device, first byte, one past the last byte) that `t` can touch, or None if empty/unknown."""
    try:
        n = int(t.numel())
        if n == 0:
            return None
        size = int(t.element_size())
        lo = int(t.data_ptr())
        extent = sum((int(d) - 1) * abs(int(s)) for d, s in zip(t.shape, t.stride()))
        return dev_index(t), lo, lo + (extent + 1) * size
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None


def expect_disjoint(out_name: str, out, inputs: Mapping[str, Any]) -> None:
    """R-LAYOUT if the memory `out` spans meets the memory of any input (a tensor, or a span
    (device, first byte, end)): the kernel reads the inputs while it writes the output, so an
    overlap gives wrong results."""
    o = _span(out)
    if o is None:
        return
    for name, t in inputs.items():
        s = t if isinstance(t, tuple) else _span(t) if t is not None else None
        if s is not None and s[0] == o[0] and s[1] < o[2] and o[1] < s[2]:
            raise LaunchError("R-LAYOUT", f"{out_name} shares memory with {name} (bytes {o[1]:#x}..{o[2]:#x} and "
                              f"{s[1]:#x}..{s[2]:#x}): the kernel reads {name} while it writes {out_name}",
                              hint=f"pass a separate {out_name} (or out=None for a new one)")


def refuse_unused(what: str, kwargs: Mapping[str, Any], readers: Mapping[str, str]) -> None:
    """R-PARAM for each keyword argument that is not None although `what` does not read it;
    `readers` names what does read it (for the hint)."""
    for name, v in kwargs.items():
        if v is not None:
            raise LaunchError("R-PARAM", f"{what} does not use {name}= (got {_show(v)}); it would be ignored",
                              hint=f"{name}= is read by {readers.get(name, 'another variant')}: drop it, or "
                                   "choose that variant")


def expect_manifest(path: str | Path, what: str, *, params: set[str], facts: Mapping[str, int] | None = None,
                    hint: str = "") -> Manifest:
    """Read `path` and check it is a manifest of `what`: exactly these caller parameters and
    these fact values (R-MANIFEST naming the difference)."""
    m = Manifest.from_file(path)
    lent = set(m.lent)
    wrong = {k: m.facts.get(k) for k, v in (facts or {}).items() if m.facts.get(k) != v}
    if lent != params or wrong:
        diff = []
        if lent != params:
            diff.append(f"parameters {sorted(lent)} (expected {sorted(params)})")
        if wrong:
            diff.append(f"facts {wrong} (expected {dict(facts or {})})")
        raise LaunchError("R-MANIFEST", f"{path} is not a manifest of {what}: {', '.join(diff)}",
                          hint=hint or "point kernel_dir at the directory this kernel was built into")
    return m


def expect_cubin(path: str | Path, hint: str = "") -> None:
    """R-MANIFEST unless `path` is an ELF file for CUDA (e_machine 190): a truncated or foreign
    file is refused here, not by the driver's module load."""
    path = input_path(path, "cubin")  # not a str / os.PathLike: R-PARAM, not open()'s TypeError
    try:
        head = read_regular(path)[:20]
    except (OSError, ValueError) as e:
        raise LaunchError("R-MANIFEST", f"cannot read cubin {path}: {why_unreadable(e)}",
                          hint=hint or "point kernel_dir at the directory the kernel was built into") from None
    if len(head) < 20 or head[:4] != b"\x7fELF" or int.from_bytes(head[18:20], "little") != 190:
        raise LaunchError("R-MANIFEST", f"{path} is not a CUDA cubin (no ELF header for EM_CUDA)",
                          hint=hint or "relink it: `pipelink link` writes the cubin beside its manifest")


def kernel_file(path: str | Path, hint: str = "") -> Path:
    """`path` resolved (an entry's cache key) if it is a regular file, else R-MANIFEST "no kernel at":
    Path.is_file and Path.resolve raise for a name too long, a loop of links or a NUL (kernel_dir=
    or a $PIPELINK_*_DIR), and those are refused here with the reason, not as a traceback."""
    p = Path(path)
    why = "missing, or not a regular file"
    try:
        if p.is_file():
            return p.resolve()
    except RuntimeError:  # Path.resolve before Python 3.13: "Symlink loop from ..."
        why = "a loop of symbolic links"
    except (OSError, ValueError) as e:
        why = why_unreadable(e)
    raise LaunchError("R-MANIFEST", f"no kernel at {display(p)} ({why})",
                      hint=hint or "point kernel_dir at the directory the kernel was built into")


def read_hf_config(path_or_dict) -> tuple[dict, str]:
    """(config, where) from a dict, a config.json path or a checkpoint directory; R-CONFIG else."""
    if isinstance(path_or_dict, Mapping):
        return dict(path_or_dict), "config"
    if not isinstance(path_or_dict, (str, os.PathLike)) or not os.fspath(path_or_dict):
        raise LaunchError("R-CONFIG", f"{type(path_or_dict).__name__} is not a config.json path or a dict",
                          hint="pass the path of the model's config.json (or its directory, or its parsed dict)")
    p = Path(path_or_dict)
    if is_dir(p):
        p = p / "config.json"
    try:  # read_regular: a FIFO would block forever, /dev/zero never ends, a huge file is no config
        text = read_regular(p, MAX_TEXT_BYTES).decode("utf-8")
    except (OSError, ValueError) as e:
        why = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else why_unreadable(e)
        raise LaunchError("R-CONFIG", f"cannot read {p}: {why}",
                          hint="pass the config.json of a downloaded checkpoint") from None
    try:
        cfg = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise LaunchError("R-CONFIG", f"{p} is not JSON: {e}", hint="pass the model's own config.json") from None
    if not isinstance(cfg, dict):
        raise LaunchError("R-CONFIG", f"{p} holds a JSON {type(cfg).__name__}, not an object",
                          hint="pass the model's own config.json (a JSON object of fields)")
    return cfg, str(p)


def is_dir(p: Path) -> bool:
    """Path.is_dir without its OSError (a name too long, a loop of links): False, and reading the
    path then says why in a coded refusal."""
    try:
        return p.is_dir()
    except (OSError, ValueError):
        return False


def hf_field(where: str, field: str, v, kind: type):
    """The config field's value if it has the type transformers gives it (an int is no bool; a
    float may be written as an int); else R-CONFIG."""
    ok = (isinstance(v, bool) if kind is bool else isinstance(v, str) if kind is str else
          isinstance(v, int) and not isinstance(v, bool) if kind is int else
          isinstance(v, (int, float)) and not isinstance(v, bool))
    if not ok:
        want = {int: "an int", bool: "a bool (true/false)", str: "a string", float: "a number"}[kind]
        raise LaunchError("R-CONFIG", f"{where}: {field} = {v!r} ({type(v).__name__}) must be {want}",
                          hint="the config.json is damaged or not a transformers config; re-download it")
    if kind is float:
        try:
            return float(v)
        except OverflowError:  # an int past float's range
            raise LaunchError("R-CONFIG", f"{where}: {field} = {_show(v)} does not fit a float",
                              hint="the config.json is damaged or not a transformers config; re-download it") from None
    return v
