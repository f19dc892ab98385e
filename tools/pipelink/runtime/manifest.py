"""Manifest pass of the runtime: a linked kernel's manifest.json read into typed data (`Manifest`),
and the parameter types it may name (its bounds and grid names: pipelink.common.manifest_schema)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from pipelink.common.expr import ExprError, names_in
from pipelink.common.files import MAX_TEXT_BYTES, display, read_regular, why_unreadable
from pipelink.common.manifest_schema import BUILTIN_GRID_NAMES, DYNAMIC_SMEM_MAX, MANIFEST_FORMAT, PARAM_BLOCK_MAX
from pipelink.runtime.host import HostBinding, HostProvider
from pipelink.runtime.launch_error import LaunchError
from pipelink.runtime.workspace import Workspace


def input_path(path, what: str) -> Path:
    """A path argument of the runtime (str or os.PathLike), else R-PARAM: Path(None) or Path(3)
    would raise a TypeError from deep inside."""
    import os

    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise LaunchError("R-PARAM", f"{what} must be a path (str or os.PathLike), not {type(path).__name__} {path!r}"[:300],
                          hint=f"pass {what} as a string or pathlib.Path")
    try:
        return Path(path)
    except TypeError as e:  # a PathLike whose __fspath__ returns a non-string
        raise LaunchError("R-PARAM", f"{what} is not a usable path ({e})", hint=f"pass {what} as a string or pathlib.Path") from None


# type -> (struct code, size, int range or None for f32)
PARAM_ENCODINGS: dict[str, tuple[str, int, tuple[int, int] | None]] = {
    "ptr": ("Q", 8, (0, 2**64 - 1)),
    "u64": ("Q", 8, (0, 2**64 - 1)),
    "u32": ("I", 4, (0, 2**32 - 1)),
    "i32": ("i", 4, (-(2**31), 2**31 - 1)),
    "f32": ("f", 4, None),
    "tmap": ("128s", 128, None),  # filled by the instance's host provider, never by the caller
}
_ALIGN = {"ptr": 8, "u64": 8, "u32": 4, "i32": 4, "f32": 4, "tmap": 64}


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
    host_binding: HostBinding | None = None  # ties the providers' source to their packages and the cubin
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
        p = input_path(path, "manifest_path")
        try:
            raw = read_regular(p, MAX_TEXT_BYTES)
        except FileNotFoundError:
            raise LaunchError("R-MANIFEST", f"no manifest at {display(p)}",
                              hint="pass manifest_path=, or keep <kernel>.manifest.json beside the cubin "
                                   "(`pipelink link --out-dir` writes both)") from None
        except (OSError, ValueError) as e:
            raise LaunchError("R-MANIFEST", f"cannot read manifest {display(p)}: {why_unreadable(e)}",
                              hint="give the manifest file `pipelink link` wrote") from None
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, or nested too deeply for the parser
            raise LaunchError("R-MANIFEST", f"manifest {display(p)} is not JSON ({e.__class__.__name__})",
                              hint="relink it: `pipelink link` writes the manifest") from None
        return cls.from_dict(data, display(p))

    @classmethod
    def from_dict(cls, d: Mapping, source: str = "<manifest>") -> "Manifest":
        def bad(msg: str, hint: str = "relink: `pipelink link` writes a matching manifest") -> LaunchError:
            return LaunchError("R-MANIFEST", f"{source}: {msg}", hint=hint)

        if not isinstance(d, Mapping):
            raise bad("is not a JSON object")
        fmt = d.get("format", MANIFEST_FORMAT)
        if fmt != MANIFEST_FORMAT:
            raise bad(f"format {fmt!r}; this runtime reads format {MANIFEST_FORMAT}",
                      hint="use the runtime of the pipelink that linked the kernel, or relink")
        try:  # every container and number is type-checked: a damaged manifest is R-MANIFEST, never a crash
            m = cls._typed(d, source)
        except (KeyError, TypeError, ValueError) as e:
            raise bad(f"malformed ({type(e).__name__}: {e})") from None
        _check_param_block(m, bad)
        _check_provided(m, bad)
        if m.block[0] * m.block[1] * m.block[2] > 1024:
            raise bad(f"block {list(m.block)} has more than 1024 threads")
        return dataclasses.replace(m, grid_names=_grid_names(m, bad))

    @classmethod
    def _typed(cls, d: Mapping, source: str) -> "Manifest":
        """The manifest's fields, each of its type (KeyError, TypeError or ValueError if not, from
        the first bad field in this order); no grid names yet."""
        kernel = _str(d.get("entry") or d["kernel"], "kernel")
        arch = _str(d.get("arch", ""), "arch")
        block = _dims(d.get("block", [1, 1, 1]), "block")
        cluster = _dims(d.get("cluster", [1, 1, 1]), "cluster")
        grid = [str(_int(g, "grid entry")) if not isinstance(g, str) else g  # an expression, or a constant
                for g in _arr(d.get("grid", ["1", "1", "1"]), "grid")]
        if not 1 <= len(grid) <= 3:
            raise ValueError("grid must have 1 to 3 expressions")
        grid += ["1"] * (3 - len(grid))
        dynamic_smem = _int(d.get("dynamic_smem", 0), "dynamic_smem")
        params = _obj(d.get("params", {}) or {}, "params")
        size = _int(params.get("size", 0), "params.size")
        by_name = {str(k): _str(v, f"params.by_name.{k}") for k, v in _obj(params.get("by_name") or {}, "params.by_name").items()}
        slots = tuple(sorted((Slot(_str(f["instance"], "field instance"), _str(f["name"], "field name"),
                                   _str(f["type"], "field type"), _int(f["offset"], "field offset"))
                              for f in (_obj(x, "params.fields entry") for x in _arr(params.get("fields") or [], "params.fields"))),
                             key=lambda s: s.offset))
        facts = {str(k): _int(v, f"facts.{k}") for k, v in _obj(d.get("facts") or {}, "facts").items()}
        requires = tuple(_str(r, "requires entry") for r in _arr(d.get("requires", []) or [], "requires"))
        host = tuple(HostProvider.from_dict(_obj(h, "host entry")) for h in _arr(d.get("host", []) or [], "host"))
        workspaces = tuple(Workspace.from_dict(_obj(w, "workspaces entry"))
                           for w in _arr(d.get("workspaces", []) or [], "workspaces"))
        co_resident = tuple(_str(n, "co_resident entry") for n in _arr(d.get("co_resident", []) or [], "co_resident"))
        binding = d.get("host_binding")
        binding = None if binding is None else HostBinding.from_dict(_obj(binding, "host_binding"))
        return cls(kernel, arch, block, cluster, tuple(grid), dynamic_smem, size, by_name, slots, facts,
                   requires, (), host, workspaces, co_resident, binding, source, dict(d))


def _check_param_block(m: Manifest, bad) -> None:
    """The parameter block: its size, known types, and fields that tile it as params.by_name says."""
    size, by_name = m.param_size, m.param_types
    if not 0 <= size <= PARAM_BLOCK_MAX:
        raise bad(f"params.size {size} is outside 0..{PARAM_BLOCK_MAX} (a kernel's parameter block)")
    if not 0 <= m.dynamic_smem <= DYNAMIC_SMEM_MAX:
        raise bad(f"dynamic_smem {m.dynamic_smem} is outside 0..{DYNAMIC_SMEM_MAX} bytes")
    for name, t in by_name.items():
        if t not in PARAM_ENCODINGS:
            raise bad(f"parameter {name!r} has unknown type {t!r}", hint=f"known types: {sorted(PARAM_ENCODINGS)}")
    end = 0
    for s in m.slots:
        if s.name not in by_name or by_name[s.name] != s.type:
            raise bad(f"field {s.instance}.{s.name} ({s.type}) disagrees with params.by_name "
                      f"({by_name.get(s.name, 'absent')})")
        sz = PARAM_ENCODINGS[s.type][1]
        if s.offset % _ALIGN[s.type] or s.offset < end or s.offset + sz > size:
            raise bad(f"field {s.instance}.{s.name} at offset {s.offset} is misaligned, overlaps "
                      f"or lies outside the {size}-byte parameter block")
        end = s.offset + sz
    unused = sorted(set(by_name) - {s.name for s in m.slots})
    if unused:
        raise bad(f"parameters {unused} have no field")


def _check_provided(m: Manifest, bad) -> None:
    """Host providers fill tmap parameters and read other parameters and facts; each workspace has
    its pointer field; no name is both a parameter and a fact."""
    by_name = m.param_types
    for h in m.host:
        bad_fill = [n for n in h.fills if by_name.get(n) != "tmap"]
        bad_read = [n for n in h.reads if by_name.get(n) in (None, "tmap")]
        if bad_fill or bad_read or not set(h.facts) <= set(m.facts):
            raise bad(f"host provider {h.provider} of {h.instance} fills {bad_fill or h.fills}, reads "
                      f"{bad_read or h.reads}: not parameters of the right kind, or unknown facts")
    for w in m.workspaces:
        if by_name.get(w.param) != "ptr":
            raise bad(f"workspace {w.param!r} has no pointer field")
    hidden = sorted(n for n in by_name if n.startswith("@ws:") and n not in {w.param for w in m.workspaces})
    if hidden:
        raise bad(f"fields {hidden} belong to no workspace")
    unfilled = sorted(n for n, t in by_name.items() if t == "tmap" and not any(n in h.fills for h in m.host))
    if unfilled:
        raise bad(f"tmap parameters {unfilled} have no host provider")
    clash = sorted(set(by_name) & set(m.facts))
    if clash:
        raise bad(f"names {clash} are both parameters and facts")


def _grid_names(m: Manifest, bad) -> tuple[str, ...]:
    """The launch-only names the grid and requires expressions use (neither parameter, fact nor builtin)."""
    grid_names: list[str] = []
    for text in list(m.grid) + list(m.requires):
        try:
            used = names_in(text)
        except ExprError as e:
            raise bad(str(e)) from None
        for n in sorted(used):
            t = m.param_types.get(n)
            if t in ("ptr", "f32"):
                raise bad(f"grid/requires expression {text!r} uses {t} parameter {n!r}")
            if t == "tmap":
                raise bad(f"grid/requires expression {text!r} uses tmap parameter {n!r}")
            if t is None and n not in m.facts and n not in grid_names and n not in BUILTIN_GRID_NAMES:
                grid_names.append(n)
    return tuple(grid_names)


def _obj(v, what: str) -> Mapping:
    if not isinstance(v, Mapping):
        raise TypeError(f"{what} must be a JSON object, not {type(v).__name__}")
    return v


def _arr(v, what: str) -> list:
    if not isinstance(v, list):
        raise TypeError(f"{what} must be a JSON array, not {type(v).__name__}")
    return v


def _str(v, what: str) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{what} must be a string, not {type(v).__name__}")
    return v


def _int(v, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"{what} must be an integer, not {type(v).__name__}")
    return v


def _dims(v, what: str) -> tuple[int, int, int]:
    v = [_int(x, what) for x in _arr(v, what)]
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
