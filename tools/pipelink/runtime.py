"""Run pass: load a linked cubin + its manifest and launch it with parameters by name.

    from pipelink.runtime import Kernel, LaunchError
    k = Kernel.load("out/toy.cubin")                 # manifest: out/toy.manifest.json
    k(x=..., tiles=64, blocks=132)                    # on torch's current stream
    k.launch(grid=(8, 1, 1), stream=s, **params)      # explicit grid / stream

The kernel takes ONE by-value parameter, `struct PlKernelParams`, whose fields the manifest
lists (instance, name, type, offset). A parameter name is one host value across the kernel:
it is written into every instance's field of that name. Values:

  ptr       a CUDA tensor (torch, or anything with `data_ptr()`/`is_cuda`; must be on the
            kernel's device and contiguous), an object with `__cuda_array_interface__`, or
            an int (a raw device pointer)
  u32/i32/u64  an int in the type's range (bool is refused)
  f32       an int or float representable as a float

The grid comes from the manifest's grid expressions over the scalar parameters, the facts,
and launch-only names (a grid name that is neither, e.g. the toy's `blocks`, is an extra
int the caller passes). A `/` in a grid expression must divide exactly, else R-SHAPE names
the parameter; `//` floors and `ceil_div(a, b)` rounds up, on purpose. An optional
manifest `requires` list holds expressions that must evaluate nonzero.

Everything up to the launch call is pure (`plan_launch`, `coerce_params`, `pack_params`,
`grid_dims`) and runs without a GPU. Launching uses cuda.bindings' driver API directly
(module load, function attributes, cuLaunchKernel with `kernelParams` pointing at one
host buffer): no allocation, no synchronisation, so a launch can be captured into a CUDA
graph (`torch.cuda.graph`). Every CUDA return code is checked; every failure is a
`LaunchError` (a `Rejected` with one R-* diagnostic and a hint).
"""

from __future__ import annotations

import ast
import ctypes
import difflib
import json
import math
import operator
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from pipelink.diagnostics import Diagnostic, Fact, Rejected
from pipelink.expr import ExprError, evaluate, names_in
from pipelink.host import HostEncoder, HostProvider, run_providers
from pipelink.workspace import Arena, Workspace

SUPPORTED_MANIFEST_FORMAT = 1

RUNTIME_CODES: dict[str, str] = {
    "R-PARAM": "a launch parameter is missing, unknown, of the wrong kind or range, or ignored by the variant",
    "R-SHAPE": "a shape does not fit the kernel (grid not divisible, out of range, wrong tensor shape)",
    "R-DTYPE": "a tensor has the wrong element type",
    "R-LAYOUT": "a tensor is not laid out as the kernel needs (contiguity, alignment), or an output overlaps an input",
    "R-DEVICE": "the GPU, its architecture or a tensor's device does not fit the kernel",
    "R-MANIFEST": "the manifest is missing, damaged, or disagrees with the cubin",
    "R-CUDA": "a CUDA driver call failed",
    "R-HOST": "a host provider refused the lent values, failed, or returned a wrong parameter region",
    "R-WORKSPACE": "a caller-lent workspace buffer names no workspace of the kernel, is too small or misaligned",
}

# type -> (struct code, size, int range or None for f32)
_TYPES: dict[str, tuple[str, int, tuple[int, int] | None]] = {
    "ptr": ("Q", 8, (0, 2**64 - 1)),
    "u64": ("Q", 8, (0, 2**64 - 1)),
    "u32": ("I", 4, (0, 2**32 - 1)),
    "i32": ("i", 4, (-(2**31), 2**31 - 1)),
    "f32": ("f", 4, None),
    "tmap": ("128s", 128, None),  # filled by the instance's host provider, never by the caller
}
_ALIGN = {"ptr": 8, "u64": 8, "u32": 4, "i32": 4, "f32": 4, "tmap": 64}
# Grid names the runtime supplies from the device: its SM count, and how many CTAs of this
# kernel (whole clusters) can be resident at once, for persistent grids whose CTAs wait on
# each other ("min(resident_ctas, tiles)").
BUILTIN_GRID_NAMES = ("num_sms", "resident_ctas")
_GRID_LIMITS = (2**31 - 1, 65535, 65535)
_FLT_MAX = 3.4028234663852886e38


class LaunchError(Rejected):
    """A launch refused before (or failed at) the CUDA call: one R-* diagnostic."""

    def __init__(self, code: str, message: str, *, hint: str = "", facts: Iterable[Fact] = ()):
        super().__init__(Diagnostic(code, message, "", tuple(facts), hint))

    @property
    def code(self) -> str:
        return self.diagnostics[0].code

    @property
    def hint(self) -> str:
        return self.diagnostics[0].hint

    def __str__(self) -> str:
        return self.diagnostics[0].render()


# --------------------------------------------------------------------------------------
# manifest
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    instance: str
    name: str
    type: str
    offset: int


@dataclass(frozen=True)
class Manifest:
    kernel: str  # the entry symbol in the cubin
    arch: str
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    grid: tuple[str, str, str]
    dynamic_smem: int
    param_size: int
    param_types: dict[str, str]  # kernel-wide name -> type
    slots: tuple[Slot, ...]  # every instance's field, in offset order
    facts: dict[str, int]
    requires: tuple[str, ...] = ()
    grid_names: tuple[str, ...] = ()  # launch-only names the grid expressions use
    host: tuple[HostProvider, ...] = ()  # providers filling the tmap parameters
    workspaces: tuple[Workspace, ...] = ()  # runtime-lent global memory (hidden ptr fields)
    co_resident: tuple[str, ...] = ()  # instances that wait for other CTAs: all CTAs must fit at once
    source: str = ""
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def provided(self) -> frozenset[str]:
        """Parameters filled by host providers (the caller never passes them)."""
        return frozenset([n for p in self.host for n in p.fills] + [w.param for w in self.workspaces])

    @property
    def lent(self) -> dict[str, str]:
        """Parameters the caller passes: name -> type."""
        return {n: t for n, t in self.param_types.items() if n not in self.provided}

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @classmethod
    def from_file(cls, path: str | Path) -> "Manifest":
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except FileNotFoundError:
            raise LaunchError("R-MANIFEST", f"no manifest at {p}",
                              hint="pass manifest_path=, or keep <kernel>.manifest.json beside the cubin "
                                   "(`pipelink link --out-dir` writes both)") from None
        except (OSError, ValueError) as e:
            raise LaunchError("R-MANIFEST", f"cannot read manifest {p}: {e}", hint="relink it") from None
        return cls.from_dict(data, str(p))

    @classmethod
    def from_dict(cls, d: Mapping, source: str = "<manifest>") -> "Manifest":
        def bad(msg: str, hint: str = "relink: `pipelink link` writes a matching manifest") -> LaunchError:
            return LaunchError("R-MANIFEST", f"{source}: {msg}", hint=hint)

        if not isinstance(d, Mapping):
            raise bad("is not a JSON object")
        fmt = d.get("format", SUPPORTED_MANIFEST_FORMAT)
        if fmt != SUPPORTED_MANIFEST_FORMAT:
            raise bad(f"format {fmt!r}; this runtime reads format {SUPPORTED_MANIFEST_FORMAT}",
                      hint="use the runtime of the pipelink that linked the kernel, or relink")
        try:
            kernel = str(d.get("entry") or d["kernel"])
            arch = str(d.get("arch", ""))
            block = _dims(d.get("block", [1, 1, 1]), "block")
            cluster = _dims(d.get("cluster", [1, 1, 1]), "cluster")
            grid = [str(g) for g in d.get("grid", ["1", "1", "1"])]
            if not 1 <= len(grid) <= 3:
                raise ValueError("grid must have 1 to 3 expressions")
            grid += ["1"] * (3 - len(grid))
            dynamic_smem = int(d.get("dynamic_smem", 0))
            params = d.get("params", {}) or {}
            size = int(params.get("size", 0))
            by_name = {str(k): str(v) for k, v in (params.get("by_name") or {}).items()}
            slots = tuple(sorted((Slot(str(f["instance"]), str(f["name"]), str(f["type"]), int(f["offset"]))
                                  for f in params.get("fields") or []), key=lambda s: s.offset))
            facts = {str(k): int(v) for k, v in (d.get("facts") or {}).items()}
            requires = tuple(str(r) for r in d.get("requires", []) or [])
            host = tuple(HostProvider.from_dict(h) for h in d.get("host", []) or [])
            workspaces = tuple(Workspace.from_dict(w) for w in d.get("workspaces", []) or [])
            co_resident = tuple(str(n) for n in d.get("co_resident", []) or [])
        except (KeyError, TypeError, ValueError) as e:
            raise bad(f"malformed ({type(e).__name__}: {e})") from None
        for name, t in by_name.items():
            if t not in _TYPES:
                raise bad(f"parameter {name!r} has unknown type {t!r}", hint=f"known types: {sorted(_TYPES)}")
        end = 0
        for s in slots:
            if s.name not in by_name or by_name[s.name] != s.type:
                raise bad(f"field {s.instance}.{s.name} ({s.type}) disagrees with params.by_name "
                          f"({by_name.get(s.name, 'absent')})")
            sz = _TYPES[s.type][1]
            if s.offset % _ALIGN[s.type] or s.offset < end or s.offset + sz > size:
                raise bad(f"field {s.instance}.{s.name} at offset {s.offset} is misaligned, overlaps "
                          f"or lies outside the {size}-byte parameter block")
            end = s.offset + sz
        unused = sorted(set(by_name) - {s.name for s in slots})
        if unused:
            raise bad(f"parameters {unused} have no field")
        for h in host:
            bad_fill = [n for n in h.fills if by_name.get(n) != "tmap"]
            bad_read = [n for n in h.reads if by_name.get(n) in (None, "tmap")]
            if bad_fill or bad_read or not set(h.facts) <= set(facts):
                raise bad(f"host provider {h.provider} of {h.instance} fills {bad_fill or h.fills}, reads "
                          f"{bad_read or h.reads}: not parameters of the right kind, or unknown facts")
        for w in workspaces:
            if by_name.get(w.param) != "ptr":
                raise bad(f"workspace {w.param!r} has no pointer field")
        hidden = sorted(n for n in by_name if n.startswith("@ws:") and n not in {w.param for w in workspaces})
        if hidden:
            raise bad(f"fields {hidden} belong to no workspace")
        unfilled = sorted(n for n, t in by_name.items() if t == "tmap" and not any(n in h.fills for h in host))
        if unfilled:
            raise bad(f"tmap parameters {unfilled} have no host provider")
        clash = sorted(set(by_name) & set(facts))
        if clash:
            raise bad(f"names {clash} are both parameters and facts")
        if block[0] * block[1] * block[2] > 1024:
            raise bad(f"block {list(block)} has more than 1024 threads")
        grid_names: list[str] = []
        for text in grid + list(requires):
            try:
                used = names_in(text)
            except ExprError as e:
                raise bad(str(e)) from None
            for n in sorted(used):
                t = by_name.get(n)
                if t in ("ptr", "f32"):
                    raise bad(f"grid/requires expression {text!r} uses {t} parameter {n!r}")
                if t == "tmap":
                    raise bad(f"grid/requires expression {text!r} uses tmap parameter {n!r}")
                if t is None and n not in facts and n not in grid_names and n not in BUILTIN_GRID_NAMES:
                    grid_names.append(n)
        return cls(kernel, arch, block, cluster, tuple(grid), dynamic_smem, size, by_name, slots, facts,
                   requires, tuple(grid_names), host, workspaces, co_resident, source, dict(d))


def _dims(v, what: str) -> tuple[int, int, int]:
    v = [int(x) for x in v]
    if not 1 <= len(v) <= 3 or any(x < 1 for x in v):
        raise ValueError(f"{what} must be 1 to 3 positive integers")
    return tuple(v + [1] * (3 - len(v)))  # type: ignore[return-value]


def default_manifest_path(cubin_path: str | Path) -> Path:
    """`toy.cubin` and `toy.control.cubin` -> `toy.manifest.json` (the control shares it)."""
    p = Path(cubin_path)
    stem = p.name[: -len(".cubin")] if p.name.endswith(".cubin") else p.stem
    if stem.endswith(".control"):
        stem = stem[: -len(".control")]
    return p.with_name(stem + ".manifest.json")


# --------------------------------------------------------------------------------------
# pure parts: coerce -> grid -> pack
# --------------------------------------------------------------------------------------


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
    known = {(w.name if w.scope == "kernel" else f"{w.instance}.{w.name}") for w in m.workspaces}
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
        key = w.name if w.scope == "kernel" else f"{w.instance}.{w.name}"
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


# --------------------------------------------------------------------------------------
# tensor checks for per-kernel wrappers
# --------------------------------------------------------------------------------------


def expect_tensor(name: str, t, **kw) -> None:  # the tensor checks of wrappers: pipelink.entry
    from pipelink.entry import expect_tensor as check
    check(name, t, **kw)


# --------------------------------------------------------------------------------------
# CUDA driver
# --------------------------------------------------------------------------------------


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise LaunchError("R-CUDA", f"cuda.bindings is not importable ({e})",
                          hint="pip install 'cuda-bindings>=13,<14' (the CUDA Python driver bindings)") from None
    return driver


def _check(drv, res, what: str, *, code: str = "R-CUDA", hint: str = ""):
    """cuda.bindings returns (err, *values): raise on err, return the values."""
    err = res[0] if isinstance(res, tuple) else res
    if err != drv.CUresult.CUDA_SUCCESS:
        try:
            _, name = drv.cuGetErrorName(err)
            _, desc = drv.cuGetErrorString(err)
            text = f"{name.decode()}: {desc.decode()}"
        except Exception:  # noqa: BLE001 - the name is a nicety
            text = str(err)
        E = drv.CUresult
        if not hint:
            hint = {
                E.CUDA_ERROR_NO_DEVICE: "no GPU is visible (CUDA_VISIBLE_DEVICES?)",
                E.CUDA_ERROR_NO_BINARY_FOR_GPU: "the cubin was built for another architecture than this GPU",
                E.CUDA_ERROR_INVALID_IMAGE: "the file is not a cubin for this driver",
                E.CUDA_ERROR_UNSUPPORTED_PTX_VERSION: "the driver is older than the toolkit that built the cubin",
                E.CUDA_ERROR_OUT_OF_RESOURCES: "too many registers or threads for this launch",
                E.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: "launch on the capturing stream, not the legacy default stream",
                E.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: "this call is not allowed during stream capture",
                E.CUDA_ERROR_INVALID_HANDLE: "the stream belongs to another device or context",
                E.CUDA_ERROR_ILLEGAL_ADDRESS: "an earlier kernel faulted; the context is unusable (run under "
                                              "compute-sanitizer to find it)",
            }.get(err, "the driver's error is quoted above (cuda.bindings' CUresult)")
        raise LaunchError(code, f"{what} failed: {text}", hint=hint)
    if isinstance(res, tuple):
        return res[1] if len(res) == 2 else res[1:]
    return None


def _arch_ok(arch: str, cc: tuple[int, int]) -> bool:
    """Can SASS for `arch` run on a device of compute capability `cc`?"""
    num = arch[3:] if arch.startswith("sm_") else ""
    digits = num.rstrip("af")
    if not digits.isdigit():
        return True  # unknown spelling: let the driver decide
    want = (int(digits) // 10, int(digits) % 10)
    if num.endswith("a"):  # architecture-specific features (wgmma, setmaxnreg): that chip only
        return cc == want
    return cc[0] == want[0] and cc[1] >= want[1]


class Kernel:
    """A linked kernel loaded on one GPU. Launch with `kernel(**params)` or `kernel.launch(...)`."""

    def __init__(self, manifest: Manifest, cubin: bytes, device: int = 0, *,
                 validate: Validator | Iterable[Validator] | None = None, name: str = ""):
        self.manifest = manifest
        self.device = int(device)
        self.name = name or manifest.kernel
        self.validators: list[Validator] = ([] if validate is None else
                                            [validate] if callable(validate) else list(validate))
        self._packer = Packer(manifest)
        self._grid_cache: dict[tuple, tuple[int, int, int]] = {}
        self._module = None
        self._arena: Arena | None = None
        drv = self._drv = _driver()
        m = manifest
        try:
            res = drv.cuInit(0)
        except Exception as e:  # noqa: BLE001 - cuda.pathfinder raises when libcuda.so is absent
            raise LaunchError("R-DEVICE", f"no NVIDIA driver: {e}",
                              hint="run on a machine with a GPU and its driver (libcuda.so)") from None
        _check(drv, res, "cuInit", code="R-DEVICE", hint="no usable NVIDIA driver or GPU here")
        count = _check(drv, drv.cuDeviceGetCount(), "cuDeviceGetCount", code="R-DEVICE")
        if not 0 <= self.device < count:
            raise LaunchError("R-DEVICE", f"device {self.device} does not exist ({count} GPU(s) visible)",
                              hint="check CUDA_VISIBLE_DEVICES and the device= argument")
        dev = self._dev = _check(drv, drv.cuDeviceGet(self.device), "cuDeviceGet", code="R-DEVICE")
        A = drv.CUdevice_attribute
        attr = lambda a: _check(drv, drv.cuDeviceGetAttribute(a, dev), "cuDeviceGetAttribute")  # noqa: E731
        cc = (attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        self.compute_capability = cc
        self.num_sms = attr(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        self._host = HostEncoder(drv)
        if m.arch and not _arch_ok(m.arch, cc):
            raise LaunchError("R-DEVICE", f"kernel {m.kernel} is built for {m.arch}; device {self.device} is "
                              f"sm_{cc[0]}{cc[1]}", hint=f"relink with --arch sm_{cc[0]}{cc[1]}"
                              f"{'a' if cc[0] >= 9 else ''} or run on a matching GPU")
        self._ctx = _check(drv, drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain", code="R-DEVICE")
        self._ctx_int = int(self._ctx)
        with self._context():
            self._module = _check(drv, drv.cuModuleLoadData(cubin), f"loading the cubin of {self.name}")
            self._func = _check(drv, drv.cuModuleGetFunction(self._module, m.kernel.encode()),
                                f"finding entry {m.kernel!r} in the cubin", code="R-MANIFEST",
                                hint="the manifest belongs to another cubin: keep the pair from one link")
            F = drv.CUfunction_attribute
            fattr = lambda a: _check(drv, drv.cuFuncGetAttribute(a, self._func), "cuFuncGetAttribute")  # noqa: E731
            self.registers = fattr(F.CU_FUNC_ATTRIBUTE_NUM_REGS)
            self.static_smem = fattr(F.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
            max_threads = fattr(F.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
            if m.threads > max_threads:
                raise LaunchError("R-MANIFEST", f"block {list(m.block)} has {m.threads} threads; the cubin's "
                                  f"{m.kernel} allows at most {max_threads}",
                                  hint="the manifest belongs to another cubin: keep the pair from one link")
            self._check_param_size()
            optin = attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            if m.dynamic_smem + self.static_smem > optin:
                raise LaunchError("R-DEVICE", f"{m.kernel} needs {m.dynamic_smem} B dynamic + {self.static_smem} B "
                                  f"static shared memory; device {self.device} allows {optin} B per block",
                                  hint="relink for this GPU (the solver sizes rings to the SM's capacity)")
            _check(drv, drv.cuFuncSetAttribute(self._func, F.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               m.dynamic_smem), "setting the dynamic shared memory limit")
            if math.prod(m.cluster) > 8:
                _check(drv, drv.cuFuncSetAttribute(self._func, F.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                                   1), "allowing a non-portable cluster size")
            self.resident_ctas = self._resident_ctas()

    def _resident_ctas(self) -> int:
        """CTAs of this kernel that fit on the device at once (whole clusters)."""
        drv, m = self._drv, self.manifest
        if m.cluster == (1, 1, 1):
            per_sm = _check(drv, drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(self._func, m.threads, m.dynamic_smem),
                            "asking the occupancy of the kernel")
            return int(per_sm) * self.num_sms
        size = math.prod(m.cluster)
        cfg = self._launch_config((size, 1, 1), 0)
        n = _check(drv, drv.cuOccupancyMaxActiveClusters(self._func, cfg), "asking how many clusters fit")
        return int(n) * size

    # ---- loading -------------------------------------------------------------------------

    @classmethod
    def load(cls, cubin_path: str | Path, manifest_path: str | Path | None = None, device: int = 0, *,
             validate: Validator | Iterable[Validator] | None = None) -> "Kernel":
        cp = Path(cubin_path)
        try:
            cubin = cp.read_bytes()
        except OSError as e:
            raise LaunchError("R-MANIFEST", f"cannot read cubin {cp}: {e.strerror or e}",
                              hint="`pipelink link --out-dir DIR` writes DIR/<kernel>.cubin") from None
        manifest = Manifest.from_file(manifest_path or default_manifest_path(cp))
        return cls(manifest, cubin, device, validate=validate, name=cp.name)

    def _check_param_size(self) -> None:
        drv, m = self._drv, self.manifest
        get = getattr(drv, "cuFuncGetParamInfo", None)
        if get is None:
            return
        # (Only index 0: probing a parameter that does not exist returns an error that
        # compute-sanitizer counts as an API error.)
        res = get(self._func, 0)
        if res[0] != drv.CUresult.CUDA_SUCCESS:
            return  # older driver: nothing to compare
        size = res[2]
        if size != (m.param_size or 4):
            raise LaunchError("R-MANIFEST", f"the cubin's {m.kernel} takes a {size}-byte parameter block; the "
                              f"manifest lays out {m.param_size} bytes",
                              hint="the manifest belongs to another cubin: keep the pair from one link")

    def close(self) -> None:
        drv = self._drv
        if self._module is not None:
            with self._context():
                if self._arena is not None:
                    _check(drv, drv.cuCtxSynchronize(), "waiting for launches before freeing workspaces")
                    self._arena.close()
                _check(drv, drv.cuModuleUnload(self._module), "cuModuleUnload")
            self._module = None
            _check(drv, drv.cuDevicePrimaryCtxRelease(self._dev), "cuDevicePrimaryCtxRelease")

    def __del__(self):  # best effort; interpreter shutdown may have torn the driver down
        try:
            if getattr(self, "_module", None) is not None and not sys.is_finalizing():
                self.close()
        except Exception:  # noqa: BLE001
            pass

    def __repr__(self) -> str:
        m = self.manifest
        return (f"Kernel({self.name}: {m.kernel} on cuda:{self.device}, block {list(m.block)}, "
                f"{m.dynamic_smem} B dynamic smem, params({_signature(m)}), grid {list(m.grid)})")

    class _Ctx:
        __slots__ = ("k", "pushed")

        def __init__(self, k):
            self.k, self.pushed = k, False

        def __enter__(self):
            drv = self.k._drv
            cur = drv.cuCtxGetCurrent()
            if cur[0] != drv.CUresult.CUDA_SUCCESS or int(cur[1]) != self.k._ctx_int:
                _check(drv, drv.cuCtxPushCurrent(self.k._ctx), "cuCtxPushCurrent")
                self.pushed = True

        def __exit__(self, *exc):
            if self.pushed:
                _check(self.k._drv, self.k._drv.cuCtxPopCurrent(), "cuCtxPopCurrent")
            return False

    def _context(self) -> "_Ctx":
        return Kernel._Ctx(self)

    # ---- launching -----------------------------------------------------------------------

    def add_validator(self, fn: Validator) -> Validator:
        """Register `fn(kernel, params)`, called with the raw parameters before each launch."""
        self.validators.append(fn)
        return fn

    def plan(self, params: Mapping[str, Any], grid=None, workspaces=None) -> LaunchPlan:
        """Validate and pack without launching (what `launch` would do). `workspaces` lends
        caller buffers for workspaces: {name: (device pointer, bytes) or a CUDA tensor}, the
        name of a kernel-scope workspace or "<instance>.<name>" (R-WORKSPACE when unknown, too
        small for this launch or misaligned). A lent buffer of a `zero = true` workspace must be
        zero before its first launch; the kernel's protocol keeps it from then on."""
        m = self.manifest
        values = coerce_params(m, params, self.device, need_grid_names=grid is None)
        for v in self.validators:
            v(self, params)
        key = (tuple(sorted((k, v) for k, v in values.items() if m.param_types.get(k) != "ptr")),
               None if grid is None else (grid if isinstance(grid, int) else tuple(grid)))
        dims = self._grid_cache.get(key)
        if dims is None:
            dims = grid_dims(m, {**values, "num_sms": self.num_sms, "resident_ctas": self.resident_ctas}, grid)
            if len(self._grid_cache) < 4096:
                self._grid_cache[key] = dims
        if m.host or m.workspaces:
            with self._context():
                if m.host:
                    values = {**values, **run_providers(m.host, values, m.facts, self._host)}
                if m.workspaces:
                    values = {**values, **workspace_pointers(m, values, dims, self._workspace, workspaces)}
        elif workspaces:
            lent_workspaces(m, workspaces)
        return LaunchPlan(dims, m.block, m.cluster, m.dynamic_smem, self._packer.pack(values), values)

    def _workspace(self, w: Workspace, nbytes: int) -> int:
        if self._arena is None:
            drv = self._drv
            self._arena = Arena(
                lambda n: int(_check(drv, drv.cuMemAlloc(n), f"allocating {n} B of workspace")),
                lambda p: _check(drv, drv.cuMemFree(p), "freeing a workspace"),
                lambda p, n: _check(drv, drv.cuMemsetD8(p, 0, n), "zeroing a workspace"))
        return self._arena.pointer(w, nbytes)

    def open(self, grid=None, workspaces=None, **params) -> "Session":
        """Plan once (validation, grid, host providers) and keep the packed parameters:
        `session.launch()` then does no host work but the launch call, so a session can be
        captured in a CUDA graph and replayed. The lent buffers (parameters and `workspaces`,
        see `plan`) must outlive the session."""
        return Session(self, self.plan(params, grid, workspaces))

    def __call__(self, stream=None, **params) -> LaunchPlan:
        return self.launch_with(params, stream=stream)

    def launch(self, grid=None, stream=None, **params) -> LaunchPlan:
        return self.launch_with(params, grid=grid, stream=stream)

    def launch_with(self, params: Mapping[str, Any], *, grid=None, stream=None, workspaces=None) -> LaunchPlan:
        """Launch with parameters from a dict (for parameter names like `grid` or `stream`)."""
        if self._module is None:
            raise LaunchError("R-CUDA", f"kernel {self.name} was closed", hint="load it again")
        return self._launch_plan(self.plan(params, grid, workspaces), stream)

    def _launch_plan(self, p: LaunchPlan, stream) -> LaunchPlan:
        if self._module is None:
            raise LaunchError("R-CUDA", f"kernel {self.name} was closed", hint="load it again")
        h = self._stream_handle(stream)
        drv, m = self._drv, self.manifest
        buf = ctypes.create_string_buffer(p.params, len(p.params))
        argv = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
        gx, gy, gz = p.grid
        bx, by, bz = m.block
        with self._context():
            if m.cluster == (1, 1, 1):
                res = drv.cuLaunchKernel(self._func, gx, gy, gz, bx, by, bz, m.dynamic_smem, h,
                                         ctypes.addressof(argv), 0)
            else:
                res = drv.cuLaunchKernelEx(self._launch_config(p.grid, h), self._func, ctypes.addressof(argv), 0)
        _check(drv, res, f"launching {self.name} (grid {list(p.grid)}, block {list(m.block)}, "
                         f"{m.dynamic_smem} B dynamic smem)")
        return p

    def _launch_config(self, grid, stream: int):
        drv, m = self._drv, self.manifest
        cfg = drv.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = m.block
        cfg.sharedMemBytes = m.dynamic_smem
        cfg.hStream = drv.CUstream(stream)
        a = drv.CUlaunchAttribute()
        a.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = m.cluster
        cfg.attrs = [a]
        cfg.numAttrs = 1
        return cfg

    def _stream_handle(self, stream) -> int:
        if stream is None:
            torch = sys.modules.get("torch")  # torch's current stream (the capturing one under
            if torch is not None and torch.cuda.is_initialized():  # torch.cuda.graph); else the default
                return int(torch.cuda.current_stream(self.device).cuda_stream)
            return 0
        if _is_bool(stream) or isinstance(stream, (float, str, bytes)) or _is_tensor(stream):
            raise LaunchError("R-PARAM", f"stream must be a stream object or handle, not a {type(stream).__name__}",
                              hint="pass a torch.cuda.Stream, an object with __cuda_stream__, or a handle (int)")
        if isinstance(stream, int):
            if not 0 <= stream < 2**64:
                raise LaunchError("R-PARAM", f"stream handle {stream} is not a 64-bit handle",
                                  hint="pass torch.cuda.Stream().cuda_stream or None (the current stream)")
            return stream
        if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream
            dev = getattr(stream, "device", None)
            idx = getattr(dev, "index", None)
            if idx is not None and idx != self.device:
                raise LaunchError("R-DEVICE", f"stream is on cuda:{idx}, the kernel on cuda:{self.device}",
                                  hint="launch on a stream of the kernel's device")
            return int(stream.cuda_stream)
        if hasattr(stream, "__cuda_stream__"):
            return int(stream.__cuda_stream__()[1])
        try:
            return int(stream)  # cuda.bindings CUstream
        except (TypeError, ValueError):
            raise LaunchError("R-PARAM", f"cannot use {type(stream).__name__} as a CUDA stream",
                              hint="pass a torch.cuda.Stream, an object with __cuda_stream__, or a handle") from None


def load(cubin_path: str | Path, manifest_path: str | Path | None = None, device: int = 0, **kw) -> Kernel:
    return Kernel.load(cubin_path, manifest_path, device, **kw)


class Session:
    """A planned launch of one kernel with fixed parameters (`Kernel.open`)."""

    def __init__(self, kernel: Kernel, plan: LaunchPlan):
        self.kernel, self.plan = kernel, plan

    def launch(self, stream=None) -> LaunchPlan:
        return self.kernel._launch_plan(self.plan, stream)

    __call__ = launch
