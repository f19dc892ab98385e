"""Pack's check that a package's carried sources and copts rebuild its object.

The control build recompiles the carried sources as one translation unit; if they are not the
sources (or options) the object was built from, the SASS comparison fails much later with no
clue why. So pack compiles them again, links the result with the same trial kernel to PTX,
and compares that PTX with the packed object's: the same LTO-IR up to what nvcc embeds of the
build machine (paths, module ids), which PTX does not carry. A difference is P-REBUILD.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from pipelink.common.diagnostics import Fact, Rejected, reject
from pipelink.linker.contract import Contract
from pipelink.linker.scratch import scratch_dir
from pipelink.linker.toolkit import INCLUDE_DIR, Toolkit, nvjitlink_link, run_tool
from pipelink.linker.trial import trial_object

_COMMENT = re.compile(r"^\s*//")
# Internal-linkage globals (libcu++/CuTe `inline constexpr` objects, statics) are named with a
# per-compilation id that nvcc derives from -frandom-seed or a random number: a module id, not code.
_MODULE_ID = re.compile(r"(__nv_static_\d+__|_INTERNAL_|_GLOBAL__N__)[0-9a-f]{8}_")


def _normalized_ptx(c: Contract, objects: list[tuple[str, bytes]], tk: Toolkit) -> list[str]:
    ptx = nvjitlink_link([*objects, ("trial.o", trial_object(c, tk))], [f"-arch={c.arch}", "-lto", "-ptx"],
                         ptx=True, code="P-REBUILD").decode(errors="replace")
    return [_MODULE_ID.sub(r"\1<id>_", ln.rstrip()) for ln in ptx.splitlines() if ln.strip() and not _COMMENT.match(ln)]


def check_sources_rebuild(c: Contract, objects: dict[str, bytes], sources: dict[str, bytes],
                          copts: tuple[str, ...], tk: Toolkit) -> None:
    arch = c.arch[3:]
    rebuilt = []
    with scratch_dir("rebuild") as tmp:
        root = Path(tmp) / "src"
        for rel, data in sources.items():
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        units = sorted(rel for rel in sources if rel.endswith(".cu"))
        dirs = list(dict.fromkeys(str((root / rel).parent) for rel in units))
        for n, rel in enumerate(units):
            out = Path(tmp) / f"{n}.o"
            try:
                run_tool(tk.nvcc_base() + ["-dc", "-std=c++17", "-O3", f"-gencode=arch=compute_{arch},code=lto_{arch}",
                                           f"-I{INCLUDE_DIR}", f"-I{root}", *[f"-I{d}" for d in dirs], *copts,
                                           str(root / rel), "-o", str(out)], "P-REBUILD", f"recompiling {rel}")
            except Rejected as e:
                raise reject("P-REBUILD", f"{c.name}: the carried source {rel} does not compile with the carried copts",
                             clause="sources", facts=[f for d in e.diagnostics for f in d.facts],
                             hint="carry every header with --header and the -I/-D options with --copt "
                                  "(the control build compiles exactly these)") from None
            rebuilt.append((f"{n}.o", out.read_bytes()))
    want = _normalized_ptx(c, sorted(objects.items()), tk)
    got = _normalized_ptx(c, rebuilt, tk)
    if want != got:
        diff = [ln for ln in difflib.unified_diff(want, got, "packed object", "rebuilt from sources", lineterm="", n=0)
                if not ln.startswith(("---", "+++", "@@"))][:12]
        raise reject("P-REBUILD", f"{c.name}: the carried sources and copts do not rebuild the packed object",
                     clause="sources",
                     facts=[Fact("objects", ", ".join(sorted(objects))),
                            Fact("sources", ", ".join(sorted(sources)) + (f"; copts {' '.join(copts)}" if copts else "")),
                            Fact("first PTX differences", "\n".join(diff))],
                     hint="pack the sources and the exact -D/-I options (--copt) the object was compiled with, "
                          "or recompile the object from these sources")
