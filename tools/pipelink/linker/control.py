"""The control build: every component and the generated code as ONE translation unit,
compiled to LTO-IR and linked by nvJitLink as the packages are, so that it differs from the
linked kernel only in being one unit.

Components are written by different owners and were compiled apart, so one translation unit
must not let them see each other. Each package's sources are unpacked into their own folder
and #included inside their own namespace (`pl_control_<package>`), so two owners that both
define `struct Params` or a helper `tile()` do not collide. A -D option that not all packages
share becomes a #define/#undef around that package's include, not a global flag. Headers from
outside the package (system, CUDA, CUTLASS) are included first at file scope, so their
declarations stay in the global namespace. extern "C" handles keep their names inside a
namespace, so the generated code links to them as in the real link.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipelink.common.diagnostics import reject
from pipelink.common.files import control_chars
from pipelink.linker.compose import Composition
from pipelink.linker.toolkit import INCLUDE_DIR, Toolkit, gencode, lto_link_options, nvjitlink_link, run_tool

_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def _split_defines(copts: tuple[str, ...]) -> tuple[list[tuple[str, str]], list[str]]:
    """(-D name/value pairs, the other options) of one package's copts."""
    defines, other = [], []
    it = iter(copts)
    for c in it:
        if c == "-D":
            c = "-D" + next(it, "")
        if c.startswith("-D") and len(c) > 2:
            name, _, value = c[2:].partition("=")
            defines.append((name, value if "=" in c else "1"))
        else:
            other.append(c)
    return defines, other


def _check_unit_text(pkg, defines: list[tuple[str, str]]) -> None:
    """What this module writes into control.cu from a package (data from elsewhere) must stay in
    its line: a -D value `1\n#include "x"` became a line of code of the control, and a source
    path with a quote ended its #include early."""
    for name, value in defines:
        if control_chars(name) or control_chars(value):
            raise reject("L-CONTROL", f"package {pkg.name} records -D{name}={value!r}, which holds a line break or "
                                      "another control character, so it cannot be one #define of the control",
                         hint="re-pack it with defines on one line (the compile that made its objects did not see "
                              "what a #define would); the linked outputs were written")
    for rel in pkg.sources:
        if control_chars(rel) or '"' in rel or "\\" in rel:
            raise reject("P-PACKAGE", f"package {pkg.name} carries a source whose path {rel!r} cannot be written in "
                                      "an #include line (a quote, a backslash or a control character)",
                         hint="re-pack it from sources whose file names hold none of these")


def _external_includes(sources: dict[str, bytes]) -> list[str]:
    """#include lines of the package's sources that name no carried file: hoisted to file scope."""
    carried = set(sources)
    names = {Path(r).name for r in carried}
    out = []
    for rel, data in sorted(sources.items()):
        for bracket, inc in _INCLUDE.findall(data.decode(errors="replace")):
            if inc == "pipelink.h":
                continue
            local = str(Path(rel).parent / inc) if bracket == '"' else None
            if local in carried or inc in carried or Path(inc).name in names and bracket == '"':
                continue
            out.append(f"#include <{inc}>" if bracket == "<" else f'#include "{inc}"')
    return out


def build_control(comp: Composition, generated: str, tk: Toolkit, tmp: Path) -> bytes:
    root = tmp / "control"
    pkgs = comp.packages()
    for pkg in pkgs:
        if not any(rel.endswith(".cu") for rel in pkg.sources):
            raise reject("L-CONTROL", f"package {pkg.name} carries no sources, so no control can be built",
                         hint="pack it with --source for each .cu and --header for each header (the Bazel rule does "
                              "this); the linked outputs were written")
    parsed = {pkg.name: _split_defines(pkg.copts) for pkg in pkgs}
    shared_defines = set.intersection(*(set(d) for d, _ in parsed.values())) if parsed else set()
    flags: list[str] = []
    hoisted: list[str] = []
    includes: list[str] = []
    parts = ["// pipelink control: every component and the generated code in one translation unit,",
             "// each component in its own namespace (see pipelink/linker/control.py)",
             "#define PL_COMPONENT pl_control", "#include <pipelink.h>", "#undef PL_COMPONENT"]
    body = []
    for pkg in pkgs:
        base = root / pkg.name
        for rel, data in pkg.sources.items():
            if Path(rel).is_absolute() or ".." in Path(rel).parts:
                raise reject("P-PACKAGE", f"package {pkg.name} carries a source with an unsafe path: {rel}",
                             hint="re-pack it with this version of pipelink")
            dest = base / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            # GCC's #pragma once treats files of equal contents as one file: the copies of a header
            # two packages share would be included in the first namespace only. A trailing comment
            # makes each copy distinct without moving a line.
            dest.write_bytes(data + f"\n// pipelink control: the copy of package {pkg.name}\n".encode())
        defines, other = parsed[pkg.name]
        _check_unit_text(pkg, defines)
        flags += [c for c in other if c not in flags]
        hoisted += [h for h in _external_includes(pkg.sources) if h not in hoisted]
        scoped = [d for d in defines if d not in shared_defines]
        body.append(f"namespace pl_control_{pkg.name} {{")
        body += [f"#define {n} {v}" for n, v in scoped]
        for rel in sorted(pkg.sources):
            if rel.endswith(".cu"):
                body += ["#undef PL_COMPONENT", f'#include "{base / rel}"']
                includes.append(str((base / rel).parent))
        body += [f"#undef {n}" for n, _ in scoped]
        body.append(f"}}  // namespace pl_control_{pkg.name}")
    flags += [f"-D{n}={v}" for n, v in sorted(shared_defines)]
    parts += hoisted + body + ["#undef PL_COMPONENT", generated]
    unit = root / "control.cu"
    unit.write_text("\n".join(parts))
    out = root / "control.fatbin"
    inc = [f"-I{d}" for d in dict.fromkeys(includes + [str(root / pkg.name) for pkg in pkgs])]
    # Compiled as the packages are (LTO-IR, -rdc) and through nvJitLink with the link's options:
    # the control differs from the linked kernel only in being one unit. (nvcc's whole-program
    # -cubin runs another optimisation pipeline than LTO: for moe_step it gave other SASS than the
    # same unit through LTO, which is byte-identical to the link; docs/ARCHITECTURE.md.)
    run_tool(tk.nvcc_base() + ["-fatbin", "-rdc=true", "-std=c++17", "-O3", gencode(comp.arch, "lto"),
                               f"-I{INCLUDE_DIR}", *inc, *flags, str(unit), "-o", str(out)],
             "L-CONTROL", "compiling the control translation unit")
    return nvjitlink_link([(out.name, out.read_bytes())], lto_link_options(comp.arch, comp.name), code="L-CONTROL")
