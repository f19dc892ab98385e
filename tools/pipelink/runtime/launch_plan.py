"""The pure launch planning of the runtime, runnable without a GPU: parameters coerced to their
manifest types (`coerce_params`), the grid evaluated (`grid_dims`), the parameter struct
packed (`Packer`, `pack_params`), workspaces sized and lent (`workspace_pointers`), all of it
in one `plan_launch`."""

from __future__ import annotations

import ast
import difflib
import struct
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from pipelink.common.diagnostics import Fact
from pipelink.common.expr import ExprError, evaluate, names_in
from pipelink.runtime.host import HostEncoder, run_providers

from pipelink.common.manifest_schema import BUILTIN_GRID_NAMES
from pipelink.runtime.launch_error import LaunchError
from pipelink.runtime.launch_values import explicit_grid, lent_buffer, pointer, scalar
from pipelink.runtime.manifest import PARAM_ENCODINGS, Manifest

_GRID_LIMITS = (2**31 - 1, 65535, 65535)  # cuLaunchKernel's grid limits


def coerce_params(m: Manifest, params: Mapping[str, Any], device: int | None = None, *,
                  need_grid_names: bool = True) -> dict[str, int | float]:
    """Check every parameter is given, none is unknown, each fits its type; -> host values."""
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise LaunchError("R-PARAM", f"parameters must be a dict of name -> value, got {type(params).__name__}"
                          + (" with a key that is not a str" if isinstance(params, Mapping) else ""),
                          hint="pass the parameters by name: k(x=..., n=...) or launch_with({'x': ...})")
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
                               f"the kernel takes: {signature_text(m)}")
    required = list(m.lent) + (list(m.grid_names) if need_grid_names else [])
    missing = [n for n in required if n not in params]
    if missing:
        raise LaunchError("R-PARAM", f"missing parameter{'s' if len(missing) > 1 else ''} "
                          f"{', '.join(map(repr, missing))} for kernel {m.kernel}",
                          hint=f"the kernel takes: {signature_text(m)}")
    out: dict[str, int | float] = {}
    for n, t in m.lent.items():
        out[n] = pointer(n, params[n], device) if t == "ptr" else scalar(n, t, params[n], PARAM_ENCODINGS[t][2])
    for n in m.grid_names:
        if n in params:
            v = scalar(n, "i32", params[n], PARAM_ENCODINGS["i32"][2])
            if v < 0:
                raise LaunchError("R-PARAM", f"launch size {n!r} = {v} is negative", hint="pass a size >= 0")
            out[n] = v
    return out


def signature_text(m: Manifest) -> str:
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
        dims = explicit_grid(grid)
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
            fmt.append(PARAM_ENCODINGS[s.type][0])
            cur = s.offset + PARAM_ENCODINGS[s.type][1]
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


Validator = Callable[[Any, Mapping[str, Any]], None]  # fn(the Kernel launching, or None; the host values)


def plan_launch(m: Manifest, params: Mapping[str, Any], *, grid=None, device: int | None = None,
                validators: Iterable[Validator] = (), kernel: Any = None,
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
        values = {**values, **workspace_pointers(m, values, dims, workspace, lent, device)}
    elif lent:
        lent_workspaces(m, lent, device)
    data = (packer or Packer(m)).pack(values)
    return LaunchPlan(dims, m.block, m.cluster, m.dynamic_smem, data, values)


def lent_workspaces(m: Manifest, lent, device: int | None = None) -> dict[str, tuple[int, int]]:
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
        ptr, nbytes = lent_buffer(name, buf, device)
        out[name] = (ptr, nbytes)
    return out


def workspace_pointers(m: Manifest, values: Mapping[str, Any], dims, allocate, lent=None,
                       device: int | None = None) -> dict[str, int]:
    """The hidden pointer field of every workspace: a caller-lent buffer (checked against the
    launch's size and the declared alignment) or one from `allocate(w, nbytes)`."""
    env = {**_grid_env(m, values), "grid_x": dims[0]}
    lent = lent_workspaces(m, lent, device)
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
