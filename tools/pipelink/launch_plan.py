"""The pure launch planning of the runtime, runnable without a GPU: parameters coerced to their
manifest types (`coerce_params`), the grid evaluated (`grid_dims`), the parameter struct
packed (`Packer`, `pack_params`), workspaces sized and lent (`workspace_pointers`), all of it
in one `plan_launch`."""

from __future__ import annotations

import ast
import difflib
import math
import operator
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from pipelink.diagnostics import Fact
from pipelink.expr import ExprError, evaluate, names_in
from pipelink.host import HostEncoder, run_providers

if TYPE_CHECKING:
    from pipelink.runtime import Kernel

from pipelink.launch_error import LaunchError
from pipelink.manifest import _TYPES, BUILTIN_GRID_NAMES, Manifest

_GRID_LIMITS = (2**31 - 1, 65535, 65535)  # cuLaunchKernel's grid limits
_FLT_MAX = 3.4028234663852886e38

def _is_tensor(v) -> bool:
    return hasattr(v, "data_ptr") and hasattr(v, "is_cuda") and callable(v.data_ptr)


def _dev_index(v) -> int | None:
    dev = getattr(v, "device", None)
    idx = getattr(dev, "index", None)
    return 0 if idx is None and getattr(dev, "type", None) == "cuda" else idx


def _pointer(name: str, v, device: int | None) -> int:
    if _is_bool(v):
        raise LaunchError("R-PARAM", f"parameter {name!r} (ptr) got a bool",
                          hint="pass a CUDA tensor or a device pointer (int)")
    if _is_tensor(v):
        if not v.is_cuda:
            raise LaunchError("R-DEVICE", f"parameter {name!r}: tensor is on {getattr(v, 'device', 'the host')}, "
                              f"not on cuda:{device if device is not None else '?'}",
                              hint=f"move it first: {name}.to('cuda:{device if device is not None else 0}')")
        idx = _dev_index(v)
        if device is not None and idx is not None and idx != device:
            raise LaunchError("R-DEVICE", f"parameter {name!r}: tensor is on cuda:{idx}, the kernel on cuda:{device}",
                              hint=f"load the kernel with device={idx}, or move the tensor to cuda:{device}")
        if hasattr(v, "is_contiguous") and not v.is_contiguous():
            raise LaunchError("R-LAYOUT", f"parameter {name!r}: tensor of shape {tuple(getattr(v, 'shape', ()))} "
                              f"and strides {tuple(v.stride()) if hasattr(v, 'stride') else '?'} is not contiguous",
                              hint=f"pass {name}.contiguous() (the kernel indexes it densely, row-major)")
        return int(v.data_ptr())
    cai = getattr(v, "__cuda_array_interface__", None)
    if cai is not None:
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
            return int(cai["data"][0])
        except (TypeError, ValueError, KeyError, IndexError):
            raise LaunchError("R-PARAM", f"parameter {name!r}: __cuda_array_interface__ has no data pointer",
                              hint="pass a non-empty device array") from None
    try:
        p = operator.index(v)
    except TypeError:
        raise LaunchError("R-PARAM", f"parameter {name!r} (ptr) got {type(v).__name__}",
                          hint="pass a CUDA tensor, an object with __cuda_array_interface__, or a device "
                               "pointer as an int") from None
    if not 0 <= p < 2**64:
        raise LaunchError("R-PARAM", f"parameter {name!r} (ptr) = {p} is not a 64-bit address", hint="0 .. 2^64-1")
    return p


def _is_bool(v) -> bool:
    """A Python or numpy bool (which `operator.index` / `float` would turn into 0 or 1)."""
    return isinstance(v, bool) or getattr(getattr(v, "dtype", None), "kind", None) == "b"


def _scalar(name: str, t: str, v) -> int | float:
    if _is_bool(v) or _is_tensor(v) or isinstance(v, (str, bytes)):
        raise LaunchError("R-PARAM", f"parameter {name!r} ({t}) got {type(v).__name__}",
                          hint=f"pass a Python {'number' if t == 'f32' else 'int'}"
                               + (" (for a tensor's size, use e.g. x.shape[0])" if _is_tensor(v) else ""))
    if t == "f32":
        try:
            f = float(v)
        except OverflowError:
            f = _FLT_MAX * 2
        except (TypeError, ValueError):
            raise LaunchError("R-PARAM", f"parameter {name!r} (f32) got {type(v).__name__}",
                              hint="pass a float") from None
        if f != f or (math.isfinite(f) and abs(f) > _FLT_MAX):
            raise LaunchError("R-PARAM", f"parameter {name!r} (f32) = {f!r} is NaN or overflows a float",
                              hint=f"pass a number of magnitude <= {_FLT_MAX:.4g} (or inf)")
        return f
    try:
        i = operator.index(v)
    except TypeError:
        raise LaunchError("R-PARAM", f"parameter {name!r} ({t}) got {type(v).__name__} {v!r:.60}",
                          hint="pass an int (floats are not rounded for you)") from None
    lo, hi = _TYPES[t][2]  # type: ignore[misc]
    if not lo <= i <= hi:
        raise LaunchError("R-PARAM", f"parameter {name!r} = {i} is out of range for {t} [{lo}, {hi}]",
                          hint="the kernel's parameter holds only that range: split the problem or check the value")
    return i


def coerce_params(m: Manifest, params: Mapping[str, Any], device: int | None = None, *,
                  need_grid_names: bool = True) -> dict[str, int | float]:
    """Check every parameter is given, none is unknown, each fits its type; -> host values."""
    given_provided = sorted(set(params) & m.provided)
    if given_provided:
        raise LaunchError("R-PARAM", f"parameter {given_provided[0]!r} is filled by the kernel's host provider",
                          hint="do not pass it: the runtime fills it from the other parameters")
    known = set(m.lent) | set(m.grid_names)
    unknown = sorted(set(params) - known)
    if unknown:
        n = unknown[0]
        close = difflib.get_close_matches(n, sorted(known), 1)
        raise LaunchError("R-PARAM", f"unknown parameter{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(map(repr, unknown))} for kernel {m.kernel}",
                          hint=(f"did you mean {close[0]!r}? " if close else "") +
                               f"the kernel takes: {_signature(m)}")
    required = list(m.lent) + (list(m.grid_names) if need_grid_names else [])
    missing = [n for n in required if n not in params]
    if missing:
        raise LaunchError("R-PARAM", f"missing parameter{'s' if len(missing) > 1 else ''} "
                          f"{', '.join(map(repr, missing))} for kernel {m.kernel}",
                          hint=f"the kernel takes: {_signature(m)}")
    out: dict[str, int | float] = {}
    for n, t in m.lent.items():
        out[n] = _pointer(n, params[n], device) if t == "ptr" else _scalar(n, t, params[n])
    for n in m.grid_names:
        if n in params:
            v = _scalar(n, "i32", params[n])
            if v < 0:
                raise LaunchError("R-PARAM", f"launch size {n!r} = {v} is negative", hint="pass a size >= 0")
            out[n] = v
    return out


def _signature(m: Manifest) -> str:
    s = ", ".join(f"{n}: {t}" for n, t in m.lent.items())
    if m.grid_names:
        s += "; grid sizes: " + ", ".join(f"{n}: int" for n in m.grid_names)
    return s


def _grid_env(m: Manifest, values: Mapping[str, int | float]) -> dict[str, int]:
    env = dict(m.facts)
    for n in BUILTIN_GRID_NAMES:
        if n in values:
            env[n] = int(values[n])
    for n, t in m.param_types.items():
        if t not in ("ptr", "f32", "tmap") and n in values:
            env[n] = int(values[n])
    for n in m.grid_names:
        if n in values:
            env[n] = int(values[n])
    return env


def _describe(text: str, env: Mapping[str, int], m: Manifest) -> str:
    parts = []
    for n in sorted(names_in(text)):
        if n in env:
            kind = "fact" if n in m.facts else "parameter" if n in m.param_types else \
                "device" if n in BUILTIN_GRID_NAMES else "grid size"
            parts.append(f"{kind} {n} = {env[n]}")
    return ", ".join(parts)


def _exact(text: str, env: Mapping[str, int], m: Manifest, what: str) -> int:
    try:
        tree = ast.parse(text, mode="eval")
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                a, b = evaluate(ast.unparse(node.left), dict(env)), evaluate(ast.unparse(node.right), dict(env))
                if b != 0 and a % b:
                    num = ast.unparse(node.left)
                    params = [n for n in sorted(names_in(num)) if n not in m.facts]
                    who = f"parameter {params[0]!r}" if len(params) == 1 else \
                        f"parameters {params}" if params else repr(num)
                    raise LaunchError(
                        "R-SHAPE", f"{who}: {num} = {a} is not a multiple of {ast.unparse(node.right)} = {b} "
                        f"({what} = {text!r})",
                        facts=[Fact(f"kernel {m.kernel}", f"{what} = {text!r}", m.source),
                               Fact("launch", _describe(text, env, m))],
                        hint=f"this kernel supports only {num} % {ast.unparse(node.right)} == 0: pad the "
                             "input, or use a kernel built with a smaller tile")
        return evaluate(text, dict(env))
    except ExprError as e:
        code = "R-SHAPE" if "division by zero" in str(e) else "R-MANIFEST"
        raise LaunchError(code, f"{what} = {text!r}: {e}", facts=[Fact("launch", _describe(text, env, m))],
                          hint="a divisor is zero: check the sizes passed" if code == "R-SHAPE" else
                          "pass every grid size the manifest's grid expressions name") from None


def grid_dims(m: Manifest, values: Mapping[str, int | float],
              grid: Iterable[int] | int | None = None) -> tuple[int, int, int]:
    """Evaluate the grid (or check an explicit one) and the manifest's `requires`."""
    env = _grid_env(m, values)
    for text in m.requires:
        if _exact(text, env, m, "requires") == 0:
            raise LaunchError("R-SHAPE", f"requirement {text!r} does not hold ({_describe(text, env, m)})",
                              facts=[Fact(f"kernel {m.kernel}", f"requires {text!r}", m.source)],
                              hint="the kernel does not support these sizes")
    if grid is None:
        dims = [_exact(text, env, m, f"grid[{i}]") for i, text in enumerate(m.grid)]
        origin = [f"grid[{i}] = {t!r} ({_describe(t, env, m)})" for i, t in enumerate(m.grid)]
    else:
        g = [grid] if isinstance(grid, int) else list(grid)
        try:
            if any(_is_bool(x) for x in g):
                raise TypeError("bool")
            dims = [operator.index(x) for x in g]
            if not 1 <= len(dims) <= 3:
                raise TypeError("length")
        except TypeError:
            raise LaunchError("R-PARAM", f"grid {grid!r} is not 1 to 3 ints", hint="grid=(x, y, z) of ints, or "
                              "None for the manifest's grid") from None
        dims += [1] * (3 - len(dims))
        origin = [f"grid[{i}] given as {d}" for i, d in enumerate(dims)]
    for i, d in enumerate(dims):
        if d < 1:
            raise LaunchError("R-SHAPE", f"{origin[i]} is {d}: nothing to launch",
                              hint="a size is zero or too small for one tile; skip the launch for empty inputs")
        if d > _GRID_LIMITS[i]:
            raise LaunchError("R-SHAPE", f"{origin[i]} is {d}, above the CUDA limit {_GRID_LIMITS[i]}",
                              hint="split the problem into several launches")
        if d % m.cluster[i]:
            raise LaunchError("R-SHAPE", f"{origin[i]} is {d}, not a multiple of the cluster size {m.cluster[i]}",
                              hint="launch whole clusters: a multiple of the cluster size")
    fit = values.get("resident_ctas")
    if m.co_resident and fit is not None and dims[0] * dims[1] * dims[2] > fit:
        raise LaunchError("R-GRID", f"{dims[0] * dims[1] * dims[2]} CTAs ({', '.join(origin)}), but only {fit} fit on "
                          f"the device at once and {', '.join(m.co_resident)} wait(s) for other CTAs",
                          facts=[Fact(f"kernel {m.kernel}", f"co_resident: {', '.join(m.co_resident)}", m.source)],
                          hint="launch at most resident_ctas CTAs (the kernel file's grid should be min(resident_ctas, ...)); "
                               "the waiting CTAs would otherwise wait for CTAs that cannot start")
    return dims[0], dims[1], dims[2]


class Packer:
    """Packs host values into the `PlKernelParams` block with one precompiled struct."""

    def __init__(self, m: Manifest):
        fmt, cur = ["<"], 0
        for s in m.slots:
            if s.offset > cur:
                fmt.append(f"{s.offset - cur}x")
            fmt.append(_TYPES[s.type][0])
            cur = s.offset + _TYPES[s.type][1]
        if m.param_size > cur:
            fmt.append(f"{m.param_size - cur}x")
        self.struct = struct.Struct("".join(fmt))
        self.order = tuple(s.name for s in m.slots)
        self.size = max(m.param_size, 1)
        assert self.struct.size == m.param_size, (self.struct.size, m.param_size)

    def pack(self, values: Mapping[str, int | float]) -> bytes:
        data = self.struct.pack(*[values[n] for n in self.order])
        return data if data else b"\0" * 4  # no parameters: the block is `unsigned pl_unused`


def pack_params(m: Manifest, values: Mapping[str, int | float]) -> bytes:
    return Packer(m).pack(values)


@dataclass(frozen=True)
class LaunchPlan:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    dynamic_smem: int
    params: bytes  # the packed PlKernelParams block
    values: dict  # the host value of each parameter


Validator = Callable[["Kernel | None", Mapping[str, Any]], None]


def plan_launch(m: Manifest, params: Mapping[str, Any], *, grid=None, device: int | None = None,
                validators: Iterable[Validator] = (), kernel: "Kernel | None" = None,
                packer: Packer | None = None, builtins: Mapping[str, int] | None = None, host=None,
                workspace=None, lent=None) -> LaunchPlan:
    """Everything a launch decides: validation, grid, host providers, workspaces, packed
    parameters. Without a GPU, pass `builtins` (num_sms, resident_ctas), a `host` encoder
    double, and `workspace(w, nbytes) -> pointer` for workspaces. `lent` maps workspace
    names to caller buffers (see `lent_workspaces`)."""
    values = coerce_params(m, params, device, need_grid_names=grid is None)
    for v in validators:
        v(kernel, params)
    env = {**values, **(builtins or {})}
    dims = grid_dims(m, env, grid)
    if m.host:
        values = {**values, **run_providers(m.host, values, m.facts, host or HostEncoder())}
    if m.workspaces:
        values = {**values, **workspace_pointers(m, values, dims, workspace, lent)}
    elif lent:
        lent_workspaces(m, lent)
    data = (packer or Packer(m)).pack(values)
    return LaunchPlan(dims, m.block, m.cluster, m.dynamic_smem, data, values)


def lent_workspaces(m: Manifest, lent) -> dict[str, tuple[int, int]]:
    """Check the caller's workspace buffers: {name: (device pointer, bytes) or a CUDA tensor}.
    A name is a kernel-scope workspace's name ("xs") or "<instance>.<name>" for an instance's
    own; unknown names and malformed buffers are R-WORKSPACE. -> {name: (pointer, bytes)}."""
    if not lent:
        return {}
    if not isinstance(lent, Mapping):
        raise LaunchError("R-WORKSPACE", f"workspaces must be a dict of name -> (pointer, bytes), got "
                          f"{type(lent).__name__}", hint="workspaces={'xs': (ptr, nbytes)}")
    known = {w.lend_name for w in m.workspaces}
    out = {}
    for name, buf in lent.items():
        if name not in known:
            raise LaunchError("R-WORKSPACE", f"{m.kernel} has no workspace {name!r} to lend",
                              hint=f"its workspaces: {', '.join(sorted(known)) or 'none'}")
        if _is_tensor(buf):
            ptr, nbytes = int(buf.data_ptr()), int(buf.numel()) * int(buf.element_size())
            if not buf.is_contiguous():
                raise LaunchError("R-WORKSPACE", f"lent workspace {name!r}: the tensor is not contiguous",
                                  hint="lend a contiguous tensor or (pointer, bytes)")
        elif (isinstance(buf, tuple) and len(buf) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                               for v in buf)):
            ptr, nbytes = buf
        else:
            raise LaunchError("R-WORKSPACE", f"lent workspace {name!r} is a {type(buf).__name__}, not "
                              "(pointer, bytes) or a CUDA tensor", hint="workspaces={'xs': (ptr, nbytes)}")
        if not 0 < ptr < 2**64 or nbytes < 1:
            raise LaunchError("R-WORKSPACE", f"lent workspace {name!r}: pointer {ptr:#x} / {nbytes} bytes is "
                              "no device buffer", hint="lend a live device allocation and its size in bytes")
        out[name] = (ptr, nbytes)
    return out


def workspace_pointers(m: Manifest, values: Mapping[str, Any], dims, allocate, lent=None) -> dict[str, int]:
    """The hidden pointer field of every workspace: a caller-lent buffer (checked against the
    launch's size and the declared alignment) or one from `allocate(w, nbytes)`."""
    env = {**_grid_env(m, values), "grid_x": dims[0]}
    lent = lent_workspaces(m, lent)
    out = {}
    for w in m.workspaces:
        try:
            n = w.size(env)
        except ExprError as e:
            raise LaunchError("R-MANIFEST", f"workspace {w.instance}.{w.name}: {e}",
                              hint="relink: the workspace size names parameters the kernel lacks") from None
        key = w.lend_name
        if key in lent:
            ptr, have = lent[key]
            if have < n:
                raise LaunchError("R-WORKSPACE", f"lent workspace {key!r} has {have} bytes; this launch needs {n} "
                                  f"({w.bytes} for {w.instance})", facts=[Fact("launch", _describe(w.bytes, env, m))],
                                  hint="lend a larger buffer, or launch with smaller sizes")
            if ptr % w.align:
                raise LaunchError("R-WORKSPACE", f"lent workspace {key!r} at {ptr:#x} is not {w.align}-byte aligned",
                                  hint=f"allocate it {w.align}-byte aligned (cudaMalloc / cuMemCreate are)")
            out[w.param] = ptr
            continue
        if allocate is None:
            raise LaunchError("R-DEVICE", f"workspace {w.instance}.{w.name} needs a device allocation",
                              hint="launch through Kernel, or pass workspace= to plan_launch")
        out[w.param] = int(allocate(w, n))
    return out
