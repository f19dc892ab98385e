"""Pack pass: LTO-IR object(s) + contract -> a self-contained, deterministic package.

Packing measures what the compiler knows (handles referenced, symbols defined, owned fact
values, static shared memory, registers of a trial compile) by LTO-linking the object with
a generated trial kernel to PTX, and rejects a contract that does not match the object.
A package is a zip with fixed timestamps and sorted entries, so the same inputs give the
same bytes; it needs no source to link (sources ride along only for control builds).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from pipelink.common.diagnostics import Fact, Rejected, reject
from pipelink.common.files import MAX_TEXT_BYTES, display, read_bytes, read_regular, read_text, why_unreadable
from pipelink.linker.contract import ARCHES, Contract, parse_contract_text
from pipelink.linker.contract_types import fact_text, own_fact_macro
from pipelink.linker.limits import check_limits
from pipelink.linker.rebuild import check_sources_rebuild
from pipelink.linker.toolkit import find_toolkit
from pipelink.linker.trial import Measured, compiled_names, measure

FORMAT = 1


@dataclass
class Package:
    contract: Contract
    contract_text: str
    measured: Measured
    objects: dict[str, bytes]  # name -> LTO-IR object bytes
    sources: dict[str, bytes] = field(default_factory=dict)  # relpath -> text, for the control build
    copts: tuple[str, ...] = ()
    path: str = ""
    host: dict[str, bytes] = field(default_factory=dict)  # provider file name -> Python source ([host])

    @property
    def name(self) -> str:
        return self.contract.name

    def digest(self) -> str:
        h = hashlib.sha256()
        for k in sorted(self.objects):
            h.update(k.encode() + b"\0" + self.objects[k])
        h.update(self.contract_text.encode())
        for k in sorted(self.host):
            h.update(b"host\0" + k.encode() + b"\0" + self.host[k])
        return h.hexdigest()[:16]


def verify(c: Contract, m: Measured, object_names: list[str], objects: dict[str, bytes] | None = None) -> None:
    """Reject a contract that does not describe the object exactly."""
    diags = []
    side_c = f"contract {Path(c.file).name}"
    side_o = "object " + ", ".join(object_names)
    others = sorted(compiled_names(objects) - {c.name}) if objects else []
    if others and c.name not in compiled_names(objects):
        # Every handle would otherwise be reported missing or undeclared, with no word of the cause.
        diags.append(reject("P-ENTRY", f"the object was compiled as component {others[0]!r}, the contract names {c.name!r}",
                            clause="component.name",
                            facts=[Fact(side_c, f"name = {c.name!r}", str(c.origin)),
                                   Fact(side_o, f"its handles are pl_{others[0]}__* (#define PL_COMPONENT {others[0]})")],
                            hint=f"make them agree: set component.name = \"{others[0]}\" in the contract, or "
                                 f"#define PL_COMPONENT {c.name} in the source and recompile").diagnostics[0])
    declared = c.handle_symbols()
    defined = c.defined_symbols()
    used = set(m.handles)
    for sym in sorted(used):
        if sym in defined:
            diags.append(reject("P-ENTRY", f"{c.name}: the object does not define {sym}",
                                clause=defined[sym],
                                facts=[Fact(side_c, f"declares {defined[sym]}", str(c.origin)),
                                       Fact(side_o, f"has no definition of {sym}")],
                                hint="define it with the matching PL_ENTRY / PL_IMPORT / PL_CALLABLE macro").diagnostics[0])
        elif sym not in declared and sym.startswith("pl_"):
            diags.append(reject("P-UNDECLARED", f"{c.name}: the object uses handle {sym}, which the contract does not declare",
                                clause=_clause_for_symbol(sym),
                                facts=[Fact(side_o, f"calls {sym}"), Fact(side_c, "declares no such clause", str(c.origin))],
                                hint=f"add [{_clause_for_symbol(sym)}] to the contract, or stop using the handle").diagnostics[0])
    by_clause: dict[str, list[str]] = {}
    for sym, clause in declared.items():
        by_clause.setdefault(clause, []).append(sym)
    for clause, syms in by_clause.items():
        if clause == "role":
            continue  # the warp range is offered to every role; using it is optional
        if not any(s in used for s in syms):
            diags.append(reject("P-UNUSED", f"{c.name}: [{clause}] is declared but the object never uses it",
                                clause=clause,
                                facts=[Fact(side_c, f"declares [{clause}]", str(_clause_origin(c, clause))),
                                       Fact(side_o, "references none of " + ", ".join(sorted(syms)))],
                                hint="remove the clause, or use its handle (an unused claim would waste the SM)").diagnostics[0])
    prefix = f"pl_{c.name}__own__"
    for f in c.facts:
        if f.own is None:
            continue
        sym = prefix + f.name
        macro, value = own_fact_macro(f.type), fact_text(f.type, m.own_facts.get(sym, 0))
        if sym not in m.own_facts:
            diags.append(reject("P-FACT-VALUE", f"{c.name}: owned fact {f.name} is not in the object",
                                clause=f"fact.{f.name}",
                                facts=[Fact(side_c, f.own_text(), str(f.origin)), Fact(side_o, f"no {sym}")],
                                hint=f"add {macro}({f.name}, <value>) to the source").diagnostics[0])
        elif m.own_facts[sym] != f.own:
            diags.append(reject("P-FACT-VALUE", f"{c.name}: fact {f.name} is {fact_text(f.type, f.own)} in the contract "
                                f"but {value} in the object",
                                clause=f"fact.{f.name}",
                                facts=[Fact(side_c, f.own_text(), str(f.origin)),
                                       Fact(side_o, f"{macro}({f.name}, {value})")],
                                hint="rebuild the object with the contract's value (or fix the contract)").diagnostics[0])
    for sym, v in m.own_facts.items():
        if sym.startswith(prefix) and c.fact(sym[len(prefix):]) is None:
            diags.append(reject("P-UNDECLARED", f"{c.name}: the object owns fact {sym[len(prefix):]} = {v}, which the contract does not declare",
                                clause=f"fact.{sym[len(prefix):]}",
                                facts=[Fact(side_o, f"PL_OWN_FACT({sym[len(prefix):]}, {v})"), Fact(side_c, "no such fact", str(c.origin))],
                                hint=f"add [fact.{sym[len(prefix):]}] own = {v}").diagnostics[0])
    if diags:
        raise Rejected(diags)


def _clause_for_symbol(sym: str) -> str:
    parts = sym.split("__")
    if len(parts) >= 3:
        kind, name = parts[1], parts[2]
        kind = {"smem": "smem", "smem_at": "smem", "bar": "barrier", "bar_sync": "barrier", "bar_arrive": "barrier",
                "fact": "fact", "export": "export", "call": "callable.import"}.get(
            kind, "ring" if kind.startswith("ring_") else kind)
        return f"{kind}.{name}"
    return sym


def _clause_origin(c: Contract, clause: str):
    kind, _, name = clause.rpartition(".")
    for group in (c.smem, c.barriers, c.facts, c.rings, c.tensors, c.callables):
        for item in group:
            if item.name == name:
                return item.origin
    return c.origin


def pack(contract_path: str, object_paths: list[str], *, sources: list[str] = (), copts: list[str] = (),
         cuda_home: str | None = None, arch: str | None = None, check_rebuild: bool = True,
         host_provider: str | None = None) -> Package:
    text = read_text(contract_path, "contract", hint="check the --contract path")
    contract = retarget(parse_contract_text(text, contract_path), arch)
    check_limits(contract)  # before any object is read: a contract no kernel can place costs nothing
    objects = {}
    for op in object_paths:
        name = Path(op).name
        if name in objects:
            raise reject("E-USAGE", f"two --object files are named {name!r}", facts=[Fact("object", str(op))],
                         hint="a package stores objects by file name: rename one")
        objects[name] = read_bytes(op, "object", hint="compile the component first: nvcc -dc "
                                                     "-gencode=arch=compute_90a,code=lto_90a")
    if not objects:
        raise reject("E-USAGE", "pack needs at least one --object", hint="pass the component's LTO-IR object(s)")
    srcs = {rel: read_bytes(s, "source") for s, rel in _source_names(sources).items()}
    host = read_host_provider(contract, Path(contract_path).parent, host_provider)
    tk = find_toolkit(cuda_home)
    measured = measure(contract, objects, tk)
    verify(contract, measured, sorted(objects), objects)
    if srcs and check_rebuild and any(rel.endswith(".cu") for rel in srcs):
        check_sources_rebuild(contract, objects, srcs, tuple(copts), tk)
    return Package(contract, text, measured, objects, srcs, tuple(copts), contract_path, host)


def read_host_provider(contract: Contract, folder: Path, given: str | None = None) -> dict[str, bytes]:
    """The [host] provider file (`given`, else beside the contract), checked (not run): it
    must parse and define `provide(lent, facts, host)` at top level."""
    if contract.host is None:
        if given:
            raise reject("P-HOST", f"--host-provider {given} given, but the contract has no [host] clause",
                         clause="host", hint="add [host] provider/fills/reads to the contract, or drop the flag")
        return {}
    name = contract.host.provider
    fact = Fact(f"contract {Path(contract.file).name}", f"[host] provider = {name!r}", str(contract.host.origin))
    if given and Path(given).name != name:
        raise reject("P-HOST", f"--host-provider {given} is not the contract's provider {name}", clause="host.provider",
                     facts=[fact], hint=f"pass the file named {name}, or rename [host] provider")
    where = given if given else folder / name
    try:
        data = read_regular(where, MAX_TEXT_BYTES)
    except FileNotFoundError:
        raise reject("P-HOST", f"host provider {name} not found beside the contract", clause="host.provider",
                     facts=[fact], hint=f"put {name} in {folder or '.'} (Bazel: cuda_component(host_provider = ...))") from None
    except (OSError, ValueError) as e:
        raise reject("P-HOST", f"host provider {display(where)}: {why_unreadable(e)}", clause="host.provider",
                     facts=[fact], hint=f"give {name} as a readable Python file (Bazel: cuda_component(host_provider = ...))") from None
    if not check_provider_source(data):
        raise reject("P-HOST", f"host provider {name} does not define provide(lent, facts, host)",
                     clause="host.provider", facts=[fact],
                     hint="the file must be Python with a top-level `def provide(lent, facts, host):` "
                          "returning {param: bytes} for every name in fills")
    return {name: data}


def check_provider_source(data: bytes) -> bool:
    try:
        tree = ast.parse(data.decode("utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError, RecursionError, MemoryError):  # the last two: deep nesting
        return False
    return any(isinstance(n, ast.FunctionDef) and n.name == "provide" and len(n.args.args) == 3 for n in tree.body)


def retarget(contract: Contract, arch: str | None) -> Contract:
    """One contract, several architectures: the build names the arch the objects target."""
    if arch is None or arch == contract.arch:
        return contract
    if arch not in ARCHES:
        raise reject("E-USAGE", f"unknown architecture {arch!r}", hint=f"one of {sorted(ARCHES)}")
    return dataclasses.replace(contract, arch=arch)


def _source_names(sources) -> dict[str, str]:
    """Relative names for carried sources: relative to the working directory when inside it
    (as in a Bazel action), else to their common folder. Never absolute, never `..`, so a
    package holds no machine paths and unpacking it cannot escape its folder."""
    if not sources:
        return {}
    for s in sources:
        if "\0" in str(s):
            read_bytes(s, "source")  # E-FILE: the path contains a NUL byte
    rels = {s: os.path.relpath(s) for s in sources}
    if any(r.startswith("..") or os.path.isabs(r) for r in rels.values()):
        base = os.path.commonpath([os.path.dirname(os.path.abspath(s)) for s in sources])
        rels = {s: os.path.relpath(os.path.abspath(s), base) for s in sources}
    return rels
