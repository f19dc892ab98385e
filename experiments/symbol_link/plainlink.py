"""EXPERIMENT ONLY: plain symbol linking, the baseline of the symbol-linking counterexample
(issue 9; experiments/symbol_link/symbol_link_counterexample.py). Not a user feature and not part of the
`pipelink` CLI: nothing else imports it.

What teams do today without contracts: every owner compiles against shared headers that
hold the others' tile constants, and device LTO links the objects by symbol. Here that is:
the glue (handles, parameter block, dispatcher) generated for the ORIGINAL composition, so
every other owner's old facts, the old shared-memory placement and ring depths/sizes are
baked in, linked by nvJitLink with ONE owner's rebuilt object (a different tile define), with
no contract check, no re-solve and no linked-SASS check. The launch uses the original
composition's manifest (its grid, its facts for the host providers), as the host code of
such a team would.

The same mutation also goes through the real linker (`contracted`), which either propagates
the owner's new value (a normal link) or rejects the composition with its code. Both are
run as Bazel actions by experiments/symbol_link/counterexample.bzl, so a rejection is data, not a failed build:

    PYTHONPATH=tools python experiments/symbol_link/plainlink.py plain --kernel K --package P... --mutant M --cubin C --manifest J
    PYTHONPATH=tools python experiments/symbol_link/plainlink.py contracted --kernel K --package P... --mutant M --cubin C
        --manifest J --result R.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipelink.common.diagnostics import Rejected, reject
from pipelink.linker.scratch import scratch_dir

RESULT_FORMAT = 1


def _swap(packages: list, mutant) -> list:
    """The packages with the mutated owner's package in place of the original of that name."""
    names = [p.name for p in packages]
    if mutant.name not in names:
        raise reject("E-USAGE", f"mutant package {mutant.name!r} replaces none of {names}",
                     hint="a mutation rebuilds one owner of the kernel: same component name")
    return [mutant if p.name == mutant.name else p for p in packages]


def plain_link(kernel: str, packages: list, mutant, *, arch: str | None = None,
               cuda_home: str | None = None) -> tuple[bytes, dict, str]:
    """(cubin, manifest, generated source): the original composition's glue + the mutant's objects."""
    from pipelink.linker.compose import parse_kernel
    from pipelink.linker.link import INCLUDE_DIR, make_manifest, plan, resource_usage
    from pipelink.linker.toolkit import find_toolkit, gencode, lto_link_options, nvjitlink_link, run_tool

    tk = find_toolkit(cuda_home)
    comp = parse_kernel(kernel, packages, arch=arch)  # the original: its check/solve is the "shared header"
    ch, pl, src, _ = plan(comp)
    swapped = {p.name: p for p in _swap(comp.packages(), mutant)}
    with scratch_dir("plain") as tmp:
        gen, obj = Path(tmp) / "generated.cu", Path(tmp) / "generated.o"
        gen.write_text(src)
        run_tool(tk.nvcc_base() + ["-dc", "-std=c++17", "-O3", gencode(comp.arch, "lto"), f"-I{INCLUDE_DIR}",
                                   str(gen), "-o", str(obj)], "L-COMPILE", "compiling the original glue")
        inputs = []
        for pkg in comp.packages():
            objs = swapped[pkg.name].objects
            inputs += [(f"{pkg.name}/{k}", v) for k, v in sorted(objs.items())]
        inputs.append((obj.name, obj.read_bytes()))
        cubin = nvjitlink_link(inputs, lto_link_options(comp.arch, comp.name))
    manifest = make_manifest(ch, pl, resource_usage(cubin, comp.name, tk), cubin)
    manifest["plain_link"] = {"mutant": mutant.name, "mutant_digest": mutant.digest(),
                              "note": "original composition's glue and manifest; no contract check"}
    return cubin, manifest, src


def contracted_link(kernel: str, packages: list, mutant, *, arch: str | None = None,
                    cuda_home: str | None = None) -> tuple[dict, bytes, dict]:
    """(result, cubin, manifest) of pipelink linking the MUTATED composition. result["outcome"]
    is "linked" (the owner's new facts propagated) or "rejected" with the diagnostics' codes;
    a rejection gives empty cubin and manifest."""
    from pipelink.linker.compose import parse_kernel
    from pipelink.linker.link import link

    try:
        comp = parse_kernel(kernel, _swap(packages, mutant), arch=arch)
        res = link(comp, cuda_home=cuda_home)
    except Rejected as e:
        diags = list(e.diagnostics)
        return ({"format": RESULT_FORMAT, "outcome": "rejected", "codes": [d.code for d in diags],
                 "messages": [d.message for d in diags],
                 "diagnostics": [d.to_json() for d in diags]}, b"", {})  # clause, facts (file:line), hint
    return ({"format": RESULT_FORMAT, "outcome": "linked", "codes": [], "facts": dict(res.manifest["facts"]),
             "ring_depths": dict(res.placement.depths),
             "dynamic_smem": res.placement.dynamic_smem}, res.cubin, res.manifest)


def _write(path: str, data: bytes) -> None:
    Path(path).write_bytes(data)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="plainlink.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["plain", "contracted"])
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--package", action="append", default=[], required=True)
    ap.add_argument("--mutant", required=True)
    ap.add_argument("--cubin", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--result")
    ap.add_argument("--source", help="plain: also write the original glue it linked")
    ap.add_argument("--arch")
    ap.add_argument("--cuda-home")
    a = ap.parse_args(argv)
    from pipelink.common.diagnostics import render_all
    from pipelink.linker.package_io import read_package

    try:
        packages = [read_package(p) for p in a.package]
        mutant = read_package(a.mutant)
        if a.mode == "plain":
            cubin, manifest, src = plain_link(a.kernel, packages, mutant, arch=a.arch, cuda_home=a.cuda_home)
            if a.source:
                Path(a.source).write_text(src)
        else:
            result, cubin, manifest = contracted_link(a.kernel, packages, mutant, arch=a.arch, cuda_home=a.cuda_home)
            if not a.result:
                raise reject("E-USAGE", "contracted needs --result", hint="add --result PATH (the JSON of the link's outcome)")
            Path(a.result).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    except Rejected as e:  # the plain link itself failed (nvJitLink, compile): an error of the experiment
        print(render_all(e.diagnostics), file=sys.stderr)
        return 1
    _write(a.cubin, cubin)
    _write(a.manifest, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode() if manifest else b"")
    return 0


if __name__ == "__main__":
    sys.exit(main())
