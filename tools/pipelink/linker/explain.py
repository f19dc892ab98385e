"""`pipelink explain CODE` in long form: what the code means, an example that triggers it, the
fix on each side, and where docs/CONTRACTS.md describes it.

The long forms are data, pipelink/explanations/<family>.toml (one table per code, shipped as
package data); tests/linker/test_explain.py runs every example through the real passes, so an
example that stops triggering its code fails there.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

CATALOGUE = Path(__file__).resolve().parents[1] / "explanations"
DOCS = "docs/CONTRACTS.md"
# How an example is run (tests/linker/test_explain.py): files written to a folder, then
#   contract: each *.contract.toml parsed and held to the limits (limits.check_limits);
#   pack:     the *.cu compiled to LTO-IR and packed with the *.contract.toml;
#   kernel:   each contract packed over a stand-in object, the *.kernel.toml composed, checked, solved;
#   link:     each *.cu compiled and packed with its contract, the *.kernel.toml linked (with its control);
#   command:  `pipelink ARGV...` run in that folder;
#   python:   a Python snippet run in that folder;
#   bazel:    a BUILD snippet (the rules' failure tests in tests/rules/ run each B-* code).
TRIGGERS = ("contract", "pack", "kernel", "link", "command", "python", "bazel")


@dataclass(frozen=True)
class Explanation:
    code: str
    means: str
    fix: str
    docs: str
    trigger: str
    files: dict[str, str] = field(default_factory=dict)
    argv: tuple[str, ...] = ()
    python: str = ""
    note: str = ""  # how the example is run, when not by the test (why it is not run)
    compile_arch: str = ""  # pack: the arch the .cu is compiled for, when not the contract's
    copts: tuple[str, ...] = ()  # pack: the copts recorded with the carried .cu source

    def to_json(self) -> dict:
        return {"means": self.means, "fix": self.fix, "docs": self.docs, "trigger": self.trigger, "run": self.how_to_run(),
                "files": dict(self.files), "argv": list(self.argv), "python": self.python, "note": self.note}

    def render(self, summary: str) -> str:
        out = [f"{self.code}: {summary}", "", "What it means", _indent(self.means), "", "Example that triggers it"]
        for name, text in self.files.items():
            out += [f"  --- {name}", _indent(text.rstrip("\n"), 4)]
        if self.argv:
            out.append("  $ pipelink " + " ".join(self.argv))
        if self.python:
            out += ["  --- Python", _indent(self.python.rstrip("\n"), 4)]
        if how := self.how_to_run():
            out.append("  $ " + how)
        if self.note:
            out.append(_indent(self.note))
        out += ["", "Fix", _indent(self.fix), "", f"Docs: {self.docs}"]
        return "\n".join(out)


    def how_to_run(self) -> str:
        """The command that shows the code for a file-based example."""
        names = list(self.files)
        contracts = [n for n in names if n.endswith(".contract.toml")]
        if self.trigger == "contract" and contracts:
            c = contracts[0]
            return f"pipelink pack --contract {c} --object {c.split('.')[0]}.o --out {c.split('.')[0]}.plpkg"
        if self.trigger == "pack" and contracts:
            c, sm = contracts[0].split(".")[0], (self.compile_arch or "sm_90a")[3:]
            carried = f" --source {c}.cu" + "".join(f" --copt={o}" for o in self.copts) if self.copts else ""
            return (f"nvcc -dc -gencode=arch=compute_{sm},code=lto_{sm} -I tools/pipelink/include {c}.cu -o {c}.o && "
                    f"pipelink pack --contract {c}.contract.toml --object {c}.o{carried} --out {c}.plpkg")
        kernels = [n for n in names if n.endswith(".kernel.toml")]
        if self.trigger == "kernel" and kernels:
            packages = " ".join(f"--package {c.split('.')[0]}.plpkg" for c in contracts)
            return (f"pipelink plan --kernel {kernels[0]} {packages}"
                    "   (each contract packed with its component's object)")
        if self.trigger == "link" and kernels:
            packages = " ".join(f"--package {c.split('.')[0]}.plpkg" for c in contracts)
            return (f"pipelink link --kernel {kernels[0]} {packages} --out-dir out --control-cubin out/control.cubin"
                    "   (each .cu compiled and packed with its contract, without --source)")
        return ""


def _indent(text: str, n: int = 2) -> str:
    return "\n".join((" " * n + line) if line else "" for line in text.strip("\n").splitlines())


def load_catalogue(folder: Path = CATALOGUE) -> dict[str, Explanation]:
    """Every long form in the catalogue, by code."""
    out: dict[str, Explanation] = {}
    for path in sorted(folder.glob("*.toml")):
        with open(path, "rb") as f:
            for code, d in tomllib.load(f).items():
                out[code] = Explanation(
                    code=code, means=d["means"], fix=d["fix"], docs=d.get("docs", f"{DOCS}#diagnostic-codes"),
                    trigger=d["trigger"], files=dict(d.get("files", {})), argv=tuple(d.get("argv", ())),
                    python=d.get("python", ""), note=d.get("note", ""), compile_arch=d.get("compile_arch", ""),
                    copts=tuple(d.get("copts", ())))
    return out


def explanation(code: str) -> Explanation | None:
    return load_catalogue().get(code)
