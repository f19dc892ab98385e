"""Parse pass for the kernel composition: which package instances form one fused kernel."""

from __future__ import annotations

from dataclasses import dataclass

from pipelink.common.diagnostics import Fact, Rejected, reject
from pipelink.common.expr import ExprError, constant_value, never_valid
from pipelink.linker.contract import ARCHES, IDENT, LineIndex, Origin, Reader, load_toml, parse_toml_text
from pipelink.linker.contract_clauses import parse_facts
from pipelink.linker.contract_types import FactDecl
from pipelink.linker.names import reserved_reason
from pipelink.linker.package import Package


GRID_MAX = (2**31 - 1, 65535, 65535)


@dataclass(frozen=True)
class Instance:
    name: str  # unique in the kernel
    package: Package
    index: int  # the instance number within its package: the `pl_inst` its handles switch on
    origin: Origin

    @property
    def contract(self):
        return self.package.contract


@dataclass(frozen=True)
class Bind:
    importer: str  # "inst.name"
    exporter: str
    origin: Origin


@dataclass(frozen=True)
class Composition:
    name: str
    arch: str
    grid: tuple[str | int, ...]
    cluster: tuple[int, int, int]
    instances: tuple[Instance, ...]
    binds: tuple[Bind, ...]
    file: str
    launch_args: tuple[str, ...] = ()  # grid-only names the caller passes at launch (e.g. the toy's blocks)
    grid_origin: Origin | None = None  # where `grid =` was written
    facts: tuple[FactDecl, ...] = ()  # [fact.X] own = V in the kernel file: one package set, many models

    def packages(self) -> list[Package]:
        """Each distinct package once, in instance order (instances of one package share it)."""
        return list({id(i.package): i.package for i in self.instances}.values())

    def instance(self, name: str) -> Instance | None:
        return next((i for i in self.instances if i.name == name), None)


def parse_kernel(path: str, packages: list[Package], *, arch: str | None = None) -> Composition:
    data, lines, _ = load_toml(path)
    return composition_from_data(data, lines, path, packages, arch=arch)


def parse_kernel_text(text: str, file: str, packages: list[Package], *, arch: str | None = None) -> Composition:
    return composition_from_data(parse_toml_text(text, file), LineIndex(text), file, packages, arch=arch)


def composition_from_data(data, lines, file, packages, *, arch=None) -> Composition:
    # The order is the order errors are found in: the kernel table, the packages, the instances, the binds.
    top = Reader(data, "", lines, file)
    k = top.table("kernel")
    if not k.data:
        top.fail("kernel", "is required", hint='start the file with [kernel] name = "..."')
    name = _kernel_name(k)
    karch = _kernel_arch(k, arch)
    grid = _kernel_grid(k, name)
    cluster = _kernel_cluster(k)
    launch_args = k.get("launch_args", list, [])
    if not all(isinstance(a, str) and IDENT.match(a) for a in launch_args) or len(set(launch_args)) != len(launch_args):
        k.fail("launch_args", f"must be a list of distinct identifiers, not {launch_args!r}")
    k.finish()

    by_name = _packages_by_name(packages)
    instances = _instances(top, lines, file, name, by_name)
    _check_every_package_used(packages, instances, name, file)
    binds = _binds(top, lines, file)
    facts = _kernel_facts(top, name)
    top.finish()
    return Composition(name, karch, tuple(grid), tuple(cluster), tuple(instances), tuple(binds), file,
                       tuple(launch_args), k.origin("grid"), tuple(facts))


def _kernel_name(k: Reader) -> str:
    name = k.get("name", str)
    if not IDENT.match(name):
        k.fail("name", f"{name!r} is not a C identifier")
    if why := reserved_reason(name, generated_prefixes=("pl_", "Pl"), is_global=True):  # the dispatcher's name
        k.fail("name", why, hint="rename the kernel")
    return name


def _kernel_arch(k: Reader, arch: str | None) -> str:
    karch = k.get("arch", str, "sm_90a")
    if arch is not None:  # --arch "" is a mistake, not "no --arch"
        karch = arch  # the build configuration decides (one component source, several archs)
    if karch not in ARCHES:
        k.fail("arch", f"unknown architecture {karch!r}", hint=f"one of {sorted(ARCHES)}")
    return karch


def _kernel_grid(k: Reader, name: str) -> list[str | int]:
    """The grid as written, each entry checked, padded to three."""
    grid = k.get("grid", list, [1, 1, 1])
    if not 1 <= len(grid) <= 3 or not all(isinstance(g, (int, str)) and not isinstance(g, bool) for g in grid):
        k.fail("grid", f"must be a list of 1 to 3 integers or expressions, not {grid!r}")
    for n, g in enumerate(grid):
        # gridDim.x may reach 2^31 - 1, y and z 65535 (the runtime checks computed values at launch).
        if isinstance(g, int) and not 1 <= g <= GRID_MAX[n]:
            k.fail("grid", f"entry {n} is {g}; a grid extent is 1..{GRID_MAX[n]}")
        if isinstance(g, str):
            _check_grid_expression(k, name, grid, n, g)
    return list(grid) + [1] * (3 - len(grid))


def _check_grid_expression(k: Reader, name: str, grid: list, n: int, g: str) -> None:
    try:
        const = constant_value(g)
    except ExprError as e:
        raise _grid_rejection(k, name, grid, f"kernel.grid: {e}",
                              "use integers, u32 params, facts, + - * // % ( ) and min/max/ceil_div") from None
    why = never_valid(g, 1, GRID_MAX[n]) if const is None else None
    if why:  # no launch could use it: every sample of its names is out of bounds or divides by zero
        raise _grid_rejection(k, name, grid, f"kernel.grid: entry {n}: {why}",
                              f"a grid extent must come out in 1..{GRID_MAX[n]} for the launches it is meant for")
    if const is not None and not 1 <= const <= GRID_MAX[n]:  # a constant is held to an integer's bounds
        raise _grid_rejection(k, name, grid, f"kernel.grid: entry {n}, {g!r}, is {const}; a grid extent is 1..{GRID_MAX[n]}",
                              "fix the expression (a constant extent is held to the same bounds as an integer)")


def _grid_rejection(k: Reader, name: str, grid: list, message: str, hint: str) -> Rejected:
    return reject("C-EXPR", message, clause="kernel.grid",
                  facts=[Fact(f"kernel {name}", f"grid = {grid}", str(k.origin("grid")))], hint=hint)


def _kernel_cluster(k: Reader) -> list[int]:
    cluster = k.get("cluster", list, [1, 1, 1])
    if len(cluster) != 3 or not all(isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= 16 for c in cluster):
        k.fail("cluster", f"must be three integers in 1..16, not {cluster}")
    if cluster[0] * cluster[1] * cluster[2] > 16:
        k.fail("cluster", f"{cluster} has {cluster[0] * cluster[1] * cluster[2]} blocks; a cluster has at most 16")
    return cluster


def _packages_by_name(packages: list[Package]) -> dict[str, Package]:
    by_name: dict[str, Package] = {}
    for p in packages:
        if p.name in by_name:
            raise reject("L-INSTANCE", f"two packages are both named {p.name!r}",
                         facts=[Fact("package", by_name[p.name].path), Fact("package", p.path)],
                         hint="component names must be unique among the packages of one link")
        by_name[p.name] = p
    return by_name


def _instances(top: Reader, lines: LineIndex, file: str, name: str, by_name: dict[str, Package]) -> list[Instance]:
    """The [[instance]] tables, each numbered within its package."""
    inst_list = top.get("instance", list, [])
    if not inst_list:
        top.fail("instance", "a kernel needs at least one [[instance]]")
    instances: list[Instance] = []
    counts: dict[str, int] = {}
    for n, item in enumerate(inst_list):
        if not isinstance(item, dict):
            top.fail("instance", "each [[instance]] must be a table")
        r = Reader(item, "instance", lines, file)
        iname = r.get("name", str)
        pname = r.get("package", str)
        r.finish()
        origin = Origin(file, _nth_header_line(lines, "instance", n))
        _check_instance(name, iname, pname, origin, instances, by_name)
        idx = counts.get(pname, 0)
        counts[pname] = idx + 1
        instances.append(Instance(iname, by_name[pname], idx, origin))
    return instances


def _check_instance(name: str, iname: str, pname: str, origin: Origin, instances: list[Instance],
                    by_name: dict[str, Package]) -> None:
    why = reserved_reason(iname) if IDENT.match(iname) else f"instance name {iname!r} is not a C identifier"
    if why:  # an instance name is a member of the generated parameter block
        raise reject("C-SCHEMA", why, clause="instance.name",
                     facts=[Fact(f"kernel {name}", f"name = {iname!r}", str(origin))],
                     hint="an instance name is a C identifier (letters, digits, _; not starting with a digit) "
                          "and no C++ keyword")
    if any(i.name == iname for i in instances):
        raise reject("L-INSTANCE", f"instance {iname!r} appears twice", clause="instance.name",
                     facts=[Fact(f"kernel {name}", f"[[instance]] name = {iname!r}", str(origin))],
                     hint="give each instance its own name")
    if pname not in by_name:
        raise reject("L-INSTANCE", f"instance {iname!r} names package {pname!r}, which was not given",
                     clause="instance.package",
                     facts=[Fact(f"kernel {name}", f"package = {pname!r}", str(origin)),
                            Fact("packages given", ", ".join(sorted(by_name)) or "none")],
                     hint="pass the package with --package, or fix the name (it is the contract's component.name)")


def _check_every_package_used(packages: list[Package], instances: list[Instance], name: str, file: str) -> None:
    used = {i.package.name for i in instances}
    unused = [p for p in packages if p.name not in used]
    if unused:  # it would be linked into nothing, yet every change of it would relink this kernel
        raise reject("L-INSTANCE", f"package {unused[0].name!r} is given but no [[instance]] uses it",
                     clause="instance.package",
                     facts=[Fact("package", q.path) for q in unused] +
                           [Fact(f"kernel {name}", "instances: " + ", ".join(f"{i.name} ({i.package.name})"
                                                                            for i in instances), file)],
                     hint=f"drop it from --package (Bazel: from the fused_kernel's components), or add an "
                          f"[[instance]] with package = {unused[0].name!r}")


def _kernel_facts(top: Reader, name: str) -> list[FactDecl]:
    """[fact.X] tables as in a contract, but owned only: the kernel file is their one owner."""
    facts = parse_facts(top)
    for f in facts:
        if f.own is None:
            raise reject("C-SCHEMA", f"fact.{f.name}: a kernel file owns its facts; `own` is required",
                         clause=f"fact.{f.name}", facts=[Fact(f"kernel {name}", f"[fact.{f.name}]", str(f.origin))],
                         hint=f"write [fact.{f.name}] own = <value> (type = \"u64\", \"i32\" or \"bool\" "
                              "for other than u32); readers state their accept in their contracts")
    return facts


def _binds(top: Reader, lines: LineIndex, file: str) -> list[Bind]:
    binds = []
    for n, item in enumerate(top.get("bind", list, [])):
        if not isinstance(item, dict):
            top.fail("bind", "each [[bind]] must be a table")
        r = Reader(item, "bind", lines, file)
        imp, exp = r.get("import", str), r.get("export", str)
        r.finish()
        binds.append(Bind(imp, exp, Origin(file, _nth_header_line(lines, "bind", n))))
    return binds


def _nth_header_line(lines: LineIndex, table: str, n: int) -> int:
    occ = lines.occurrences.get(table, [])
    return occ[n] if n < len(occ) else 0
