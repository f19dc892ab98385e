"""Diagnostics are data: a stable code, the clause, both sides' facts, and a hint.

Every pass reports problems by raising `Rejected([...])`; the CLI renders them for people
or as JSON for tools. Nothing in the linker prints a traceback for a bad input.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Fact:
    """One side's statement that takes part in a conflict."""

    side: str  # who said it: "package loader", "kernel gemm_swiglu", "object loader.o"
    text: str  # what it says, e.g. "ring.ab depth = [2, 4]"
    origin: str = ""  # where: "loader.contract.toml:12"


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    clause: str = ""
    facts: tuple[Fact, ...] = ()
    hint: str = ""
    severity: str = "error"

    def to_json(self) -> dict:
        d = asdict(self)
        d["facts"] = [asdict(f) for f in self.facts]
        return d

    def render(self) -> str:
        lines = [f"{self.severity} {self.code}: {self.message}"]
        if self.clause:
            lines.append(f"  clause: {self.clause}")
        for f in self.facts:
            where = f" ({f.origin})" if f.origin else ""
            lines.append(f"  {f.side}: {f.text}{where}")
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)


class Rejected(Exception):
    """Raised by a pass that cannot continue; carries one or more diagnostics."""

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics = list(diagnostics)
        super().__init__("; ".join(f"{d.code}: {d.message}" for d in self.diagnostics))

    @property
    def codes(self) -> list[str]:
        return [d.code for d in self.diagnostics]


def reject(code: str, message: str, *, clause: str = "", facts=(), hint: str = "") -> Rejected:
    return Rejected(Diagnostic(code, message, clause, tuple(facts), hint))


def render_all(diags: list[Diagnostic], fmt: str = "human") -> str:
    if fmt == "json":
        return json.dumps({"ok": False, "diagnostics": [d.to_json() for d in diags]}, indent=2)
    return "\n".join(d.render() for d in diags)


# Every code the linker can emit, with the one-line meaning shown by `pipelink explain`.
CODES: dict[str, str] = {
    "E-USAGE": "the command line is wrong",
    "E-ORIGIN": "an --origin PATH=LABEL that names no file the command reads, could name two (both sides hold '='), lacks a side, gives one file two labels or holds a control character",
    "E-FILE": "an input file is missing, unreadable, not a regular file or too large",
    "E-OUTPUT": "an output path cannot be written (a directory, under a file, too long, repeated, an input, or a device/FIFO)",
    "E-PLACEMENT": "a file given to `pipelink map` or `diff-map` is not a placement `pipelink link --placement` wrote (not JSON, another kind of file, or another format)",
    "E-TEMP": "a scratch folder for intermediate files cannot be made or written in the temporary directory (TMPDIR, else /tmp: missing, read-only or full)",
    "E-INTERNAL": "a bug in pipelink itself (rerun with PIPELINK_DEBUG=1 and report it)",
    "E-TOOLKIT": "the CUDA toolkit (nvcc, nvJitLink) is missing or of the wrong version",
    "C-SYNTAX": "a contract or kernel file is not valid TOML",
    "C-SCHEMA": "a contract or kernel file has a missing, unknown or mistyped field",
    "C-EXPR": "an expression in a contract or kernel file cannot be evaluated, or is out of bounds (a constant 0 divisor)",
    "P-UNDECLARED": "the object uses a handle its contract does not declare",
    "P-UNUSED": "the contract declares a handle the object never uses",
    "P-ENTRY": "the contract's entry or import/callable export is not defined by the object",
    "P-FACT-VALUE": "an owned fact's value in the contract differs from the object's",
    "P-ARCH": "the object was not compiled for the contract's architecture",
    "P-COMPILE": "the trial compile of the object failed",
    "P-REBUILD": "the package's carried sources and copts do not rebuild its object (the control depends on them)",
    "P-PACKAGE": "a package file is damaged or of an unknown format",
    "P-LIMIT": "a size or count in the contract can exceed a hard limit of its architecture (shared memory per block, "
               "mbarrier arrivals, named barriers, threads per block, registers), at some fact value it accepts",
    "P-HOST": "the contract's [host] provider file is missing or does not define provide(lent, facts, host)",
    "L-ARCH": "components were built for different architectures or toolkits",
    "L-INSTANCE": "the kernel names an unknown package or a duplicate instance, or a package is given that no instance uses",
    "L-PARAMS": "components disagree on the host parameter layout",
    "L-HOST": "host providers disagree: two fill one parameter region, or a tmap parameter has no provider",
    "L-WORKSPACE": "the declarations of one kernel-scope workspace disagree (scope, bytes, zero or align)",
    "L-FACT-OWNERS": "a fact has no owner or more than one owner",
    "L-FACT-TYPE": "owner and reader disagree on a fact's type",
    "L-FACT-ACCEPT": "a reader cannot accept the owner's value of a fact",
    "L-FACT-UNREAD": "the kernel file owns a fact that no component (nor the grid) reads",
    "L-RING-SIDE": "a ring lacks its producer or consumer, or has two of one side",
    "L-RING-STAGE": "producer and consumer disagree on a ring's stage size",
    "L-RING-DEPTH": "producer and consumer depth ranges do not intersect",
    "L-RING-ARRIVALS": "a side's assumed arrival count differs from the other side's",
    "L-TENSOR-UNBOUND": "a tensor import has no export, or an export is bound twice",
    "L-TENSOR-SHAPE": "export and import tile shapes differ",
    "L-TENSOR-DTYPE": "export and import dtypes differ",
    "L-TENSOR-SPACE": "export and import memory spaces or scopes cannot be connected",
    "L-TENSOR-LAYOUT": "export and import layouts differ and no transfer exists between them",
    "L-CALL-UNBOUND": "a callable import has no export",
    "L-CALL-SIGNATURE": "callable import and export signatures differ",
    "L-BIND": "a [[bind]] names a missing import or export, binds an instance to itself, or repeats an import",
    "L-GRID": "a grid expression names something that is no integer parameter, fact or declared launch argument, "
              "or the facts the kernel links with take an extent out of CUDA's grid limits",
    "L-RESIDENT": "a component waits for other CTAs (co_resident = true) but the kernel's grid is not bounded by resident_ctas",
    "L-BARRIER": "more named barriers are needed than the SM has free (ids 1..15)",
    "L-BARRIER-THREADS": "a named barrier's thread count is not a multiple of 32, exceeds the block or (a "
                         "library's) its calling role, or the linked code counts other threads at it than its "
                         "contract clause says",
    "L-WARPS": "the roles need more warps than a block can have",
    "L-ROLE": "a kernel has no role, or a role is malformed",
    "L-SMEM": "the shared-memory claims do not fit the SM's capacity",
    "L-REGS": "the register budgets cannot fit the register file, or the compiled code exceeds its budget "
              "(it spills, or ptxas ignored the setmaxnreg budgets)",
    "L-SOLVE": "the solver found no placement (or gave up) for a reason not covered above",
    "L-LINK": "nvJitLink failed to link the kernel",
    "L-COMPILE": "compiling the generated code failed",
    "L-CONTROL": "the single-unit control could not be built (the linked outputs were still written)",
    "L-SASS": "the linked machine code breaks the placement (e.g. a named barrier id no clause was placed on)",
    "R-PARAM": "a launch parameter is missing, unknown, of the wrong kind or range, or ignored by the chosen variant",
    "R-GRID": "more CTAs than fit on the device at once, for a kernel whose components wait for other CTAs (co_resident)",
    "R-SHAPE": "a tensor shape or grid size does not fit the kernel (e.g. not a multiple of a tile)",
    "R-DTYPE": "a tensor has the wrong dtype",
    "R-LAYOUT": "a tensor is not contiguous or aligned as the kernel needs, or an output shares memory with an input",
    "R-DEVICE": "the GPU or tensor device does not match the kernel (arch, device index, shared memory)",
    "R-MANIFEST": "the manifest is missing, damaged, or does not match the cubin",
    "R-CONFIG": "a model config (a checkpoint's config.json) or checkpoint tensor set describes no model the entry "
                "serves, or is not readable as one",
    "R-CUDA": "a CUDA driver call failed (the driver's error is quoted)",
    "R-WORKSPACE": "a caller-lent workspace buffer names no workspace of the kernel, is too small or misaligned",
    "R-HOST": "a host provider refused the lent values, failed, or returned a wrong parameter region; or its code "
              "is not bound to this manifest and cubin, or not this workspace's and not opted in (trust_host_code)",
    "R-RANK": "a world size or rank is out of range, or two processes claim one rank (pipelink.runtime.peers)",
    "R-PEER": "the ranks' symmetric buffers disagree (size) or a peer mapping or exchange failed (pipelink.runtime.peers)",
}


def rule_codes() -> dict[str, str]:
    """The Bazel rules' B-* codes (pipelink_rules/private/errors.bzl's B_CODES, their only list),
    for `pipelink explain`; empty where the linker runs without the rules beside it."""
    import ast
    import re
    from pathlib import Path

    bzl = Path(__file__).resolve().parents[3] / "pipelink_rules" / "private" / "errors.bzl"
    try:
        m = re.search(r"^B_CODES = (\{.*?^\})", bzl.read_text(), re.S | re.M)
        table = ast.literal_eval(m.group(1)) if m else {}
    except (OSError, ValueError, SyntaxError):
        return {}
    return {k: v for k, v in table.items() if isinstance(k, str) and isinstance(v, str)}
