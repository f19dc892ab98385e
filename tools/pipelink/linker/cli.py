"""The `pipelink` command: pack, link, plan, sass-diff, map, diff-map, explain.

Every failure is a coded diagnostic (text, or JSON with --format=json) and exit 1;
usage errors exit 2. No traceback reaches the user for a bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pipelink.common.diagnostics import CODES, Diagnostic, Rejected, render_all, rule_codes
from pipelink.linker.origins import annotate, check_origin_form, resolve_origins
from pipelink.linker.usage import requested_format, usage_diagnostic


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors are diagnostics too
        raise Rejected(usage_diagnostic(self.prog, message))


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="pipelink", description="Contract-guided linker for GPU kernel components.")
    p.add_argument("--format", choices=["human", "json"], default="human", help="diagnostics and results format")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.add_argument("--origin", action="append", default=[], metavar="PATH=LABEL",
                   help="name the owner of a file in diagnostics (e.g. the Bazel target of a contract); PATH is a "
                        "file the command reads, and either side may hold '='")
    # The global options are accepted after the subcommand too (`pipelink pack ... --format=json`).
    common = _Parser(add_help=False)
    common.add_argument("--format", choices=["human", "json"], default=argparse.SUPPRESS)
    common.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS)
    common.add_argument("--origin", action="append", metavar="PATH=LABEL", default=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    _add = sub.add_parser
    sub.add_parser = lambda *a, **k: _add(*a, parents=[common], **k)  # noqa: E731

    pk = sub.add_parser("pack", help="object(s) + contract -> package (.plpkg)")
    pk.add_argument("--contract", required=True)
    pk.add_argument("--object", action="append", default=[], required=True)
    pk.add_argument("--source", action="append", default=[], help="source or header carried for control builds")
    pk.add_argument("--header", action="append", default=[], dest="source")
    pk.add_argument("--copt", action="append", default=[], help="compiler option for control builds")
    pk.add_argument("--host-provider", help="the contract's [host] provider file (default: beside the contract)")
    pk.add_argument("--out", required=True)
    pk.add_argument("--arch", help="the arch the objects were built for (overrides the contract's component.arch)")
    pk.add_argument("--cuda-home")

    ln = sub.add_parser("link", help="packages + kernel composition -> cubin + manifest")
    ln.add_argument("--kernel", required=True)
    ln.add_argument("--package", action="append", default=[], required=True)
    ln.add_argument("--out-dir", help="write <kernel>.cubin, .manifest.json, .report.json, .map.txt here")
    ln.add_argument("--cubin")
    ln.add_argument("--manifest")
    ln.add_argument("--report")
    ln.add_argument("--map")
    ln.add_argument("--source-out", help="also write the generated CUDA source")
    ln.add_argument("--placement", help="also write the placement as JSON (what `pipelink map` draws)")
    ln.add_argument("--control-cubin", help="also build the single-unit control")
    ln.add_argument("--arch")
    ln.add_argument("--cuda-home")
    ln.add_argument("--guard", action="store_true",
                    help="instrument the kernel: shared-memory red zones and handle checks that trap naming the "
                         "component (for tests, e.g. under compute-sanitizer)")
    ln.add_argument("--spills", choices=["error", "warning"], default="error",
                    help="local memory (spills, stack) in the linked kernel: an error (default) or a warning")

    pl = sub.add_parser("plan", help="check + solve only: print the placement map")
    pl.add_argument("--kernel", required=True)
    pl.add_argument("--package", action="append", default=[], required=True)
    pl.add_argument("--arch")

    sd = sub.add_parser("sass-diff", help="compare normalized SASS of a linked cubin and its control")
    sd.add_argument("linked")
    sd.add_argument("control")
    sd.add_argument("--kernel")
    sd.add_argument("--side-by-side", action="store_true")
    sd.add_argument("--cuda-home")

    from pipelink.linker.map_cli import add_map_commands

    add_map_commands(sub)

    ex = sub.add_parser("explain", help="what a diagnostic code means")
    ex.add_argument("code", nargs="?")
    return p


class _Terminated(BaseException):
    """SIGTERM (Bazel cancelling an action, `kill`): raised so that outputs.write_all puts an
    earlier run's outputs back and removes its staging folders, as for Ctrl-C."""


def _on_sigterm(signum, frame):
    raise _Terminated()


def main(argv: list[str] | None = None) -> int:
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # signal handlers: main thread only
        return _main(argv)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    fmt = requested_format(argv)
    origins = _Origins()
    try:
        args = _parser().parse_args(argv)
        fmt, origins.values = args.format, args.origin
        return _run(args, origins)
    except Rejected as e:
        diags = annotate(e.diagnostics, origins.table())
        print(render_all(diags, fmt), file=sys.stderr if fmt == "human" else sys.stdout)
        return 2 if any(d.code in ("E-USAGE", "E-ORIGIN") for d in diags) else 1
    except KeyboardInterrupt:
        return 130
    except _Terminated:
        return 143  # 128 + SIGTERM, as if the signal had killed the process (after cleaning up)
    except BrokenPipeError:  # `pipelink ... | head`
        sys.stderr.close()
        return 0
    except Exception as e:  # a linker bug: still a coded diagnostic, the traceback only on request
        if os.environ.get("PIPELINK_DEBUG"):
            raise
        diag = Diagnostic("E-INTERNAL", f"internal error: {e.__class__.__name__}: {e}",
                          hint="this is a pipelink bug; rerun with PIPELINK_DEBUG=1 for the traceback and report it")
        print(render_all([diag], fmt), file=sys.stderr if fmt == "human" else sys.stdout)
        return 3


class _Origins:
    """The --origin values and the files they may name (origins.py). Resolved strictly once the
    command knows its files; a command that fails earlier annotates with what splits already."""

    def __init__(self):
        self.values: list[str] = []
        self.known: list[str] = []
        self.resolved: list[tuple[str, str]] | None = None

    def resolve(self, known_paths) -> None:
        self.known = [str(p) for p in known_paths if p]
        self.resolved = resolve_origins(self.values, self.known)

    def table(self) -> list[tuple[str, str]]:
        if self.resolved is not None:
            return self.resolved
        return resolve_origins(self.values, self.known, strict=False)


def _load_packages(paths):
    from pipelink.linker.package_io import read_package

    return [read_package(p) for p in paths]


def _run(args, origins: _Origins) -> int:
    check_origin_form(origins.values)  # at once: a malformed --origin costs no work
    if args.cmd == "explain":
        return _explain(args, origins)
    if args.cmd == "pack":
        return _pack(args, origins)
    if args.cmd in ("link", "plan"):
        return _link(args, origins)
    if args.cmd in ("map", "diff-map"):
        from pipelink.linker.map_cli import run_map_command

        return run_map_command(args, origins, _emit)
    if args.cmd == "sass-diff":
        return _sass_diff(args, origins)
    raise AssertionError(args.cmd)


def _explain(args, origins: _Origins) -> int:
    from pipelink.linker.explain import explanation

    origins.resolve([])  # explain reads no file, so an --origin names none
    codes = {**CODES, **rule_codes()}  # the linker's, the runtime's and the Bazel rules' codes
    if args.code is not None:  # `explain ""` is a mistake, not "list every code"
        if args.code not in codes:
            raise Rejected(Diagnostic("E-USAGE", f"unknown code {args.code!r}", hint="`pipelink explain` lists them"))
        long = explanation(args.code)  # the long form: meaning, an example, the fix, the docs section
        _emit(args, {args.code: codes[args.code], **({"explanation": long.to_json()} if long else {})},
              long.render(codes[args.code]) if long else f"{args.code}: {codes[args.code]}")
    else:
        _emit(args, codes, "\n".join(f"{k:<18} {v}" for k, v in codes.items()))
    return 0


def _pack(args, origins: _Origins) -> int:
    from pipelink.linker.outputs import check_targets
    from pipelink.linker.package import pack
    from pipelink.linker.package_io import write_package

    inputs = [args.contract, *args.object, *args.source]
    origins.resolve([*inputs, args.host_provider])
    check_targets([("--out", args.out)], inputs)  # before the work: a bad --out costs nothing
    pkg = pack(args.contract, args.object, sources=args.source, copts=args.copt, cuda_home=args.cuda_home,
               arch=args.arch, host_provider=args.host_provider)
    write_package(pkg, args.out, inputs=inputs)
    m = pkg.measured
    _emit(args, {"ok": True, "package": args.out, "name": pkg.name, "handles": list(m.handles),
                 "own_facts": m.own_facts, "static_smem": m.static_smem, "registers": m.regs},
          f"packed {pkg.name} -> {args.out}: {len(m.handles)} handles, {m.static_smem} B static smem, "
          f"registers {m.regs}")
    return 0


def _link(args, origins: _Origins) -> int:
    """`link` and `plan`: both read the kernel file and its packages; plan stops before compiling."""
    from pipelink.linker.compose import parse_kernel

    origins.known = [args.kernel, *args.package]
    packages = _load_packages(args.package)
    # Diagnostics from here on cite the contracts' paths as pack recorded them.
    origins.resolve([*origins.known, *(p.contract.file for p in packages)])
    comp = parse_kernel(args.kernel, packages, arch=args.arch)
    if args.cmd == "plan":
        return _plan(args, comp)
    from pipelink.linker.link import link, write_outputs
    from pipelink.linker.outputs import check_targets

    out = _link_outputs(args, comp)
    inputs = [args.kernel, *args.package]
    targets = [(f"--{k}", str(v)) for k, v in out.items()]
    targets += [(f, v) for f, v in (("--control-cubin", args.control_cubin), ("--source-out", args.source_out),
                                    ("--placement", args.placement)) if v]
    check_targets(targets, inputs)  # before the link: a bad output path costs nothing
    res = link(comp, control=bool(args.control_cubin), cuda_home=args.cuda_home, guard=args.guard,
               spills=args.spills)
    write_outputs(res, cubin=str(out["cubin"]), manifest=str(out["manifest"]),
                  report=str(out["report"]) if "report" in out else None,
                  map_path=str(out["map"]) if "map" in out else None,
                  control=args.control_cubin, source=args.source_out, inputs=inputs,
                  placement=args.placement, labels=dict(origins.table()))
    _warn(args, res.warnings)
    if res.control_error is not None:  # the linked outputs are written and valid; only the control failed
        raise Rejected([*res.control_error.diagnostics])
    _emit(args, {"ok": True, "outputs": {k: str(v) for k, v in out.items()}, "report": res.report,
                 "warnings": [w.to_json() for w in res.warnings]}, res.map_text)
    return 0


def _plan(args, comp) -> int:
    from pipelink.linker.link import make_map, plan

    ch, pl, _, t = plan(comp)
    _emit(args, {"ok": True, "proven_optimal": pl.proven_optimal, "offsets": pl.offsets, "depths": pl.depths,
                 "barriers": pl.barrier_ids, "warp_begin": pl.warp_begin, "budgets": pl.budgets,
                 "timings_s": t}, make_map(ch, pl, {}))
    return 0


def _link_outputs(args, comp) -> dict[str, Path]:
    """cubin, manifest, report, map -> path: --out-dir's names, each overridden by its own flag."""
    out = {}
    for flag in ("out_dir", "cubin", "manifest", "report", "map", "control_cubin", "source_out", "placement"):
        if getattr(args, flag) == "":  # an empty path is a mistake, not "no such output"
            raise Rejected(Diagnostic("E-OUTPUT", f"--{flag.replace('_', '-')} is an empty path",
                                      hint="give a path, or leave the option out"))
    if args.out_dir is not None:
        d = Path(args.out_dir)
        out = {"cubin": d / f"{comp.name}.cubin", "manifest": d / f"{comp.name}.manifest.json",
               "report": d / f"{comp.name}.report.json", "map": d / f"{comp.name}.map.txt"}
    for k in ("cubin", "manifest", "report", "map"):
        if getattr(args, k) is not None:
            out[k] = Path(getattr(args, k))
    if "cubin" not in out or "manifest" not in out:
        raise Rejected(Diagnostic("E-USAGE", "link needs --out-dir, or --cubin and --manifest",
                                  hint="add --out-dir DIR (writes <kernel>.cubin, .manifest.json, ...)"))
    return out


def _sass_diff(args, origins: _Origins) -> int:
    from pipelink.common.files import read_bytes
    from pipelink.linker.sass import compare, side_by_side

    origins.resolve([args.linked, args.control])
    a, b = read_bytes(args.linked, "linked cubin"), read_bytes(args.control, "control cubin")
    res = compare(a, b, args.kernel, args.cuda_home, names=(args.linked, args.control))
    lines = []
    for name, f in res["functions"].items():
        verdict = "identical" if f["identical"] else (
            "DIFFERENT in register numbers only (the same instruction stream)" if f.get("registers_only") else "DIFFERENT")
        lines.append(f"{name}: {verdict} "
                     f"({f['linked_instructions']} linked / {f['control_instructions']} control instructions)")
        if not f["identical"]:
            lines += f["diff"][:60]
        if args.side_by_side:
            lines.append(side_by_side(a, b, name, cuda_home=args.cuda_home))
    _emit(args, res, "\n".join(lines))
    return 0 if res["identical"] else 1


def _warn(args, warnings) -> None:
    """Warnings go to stderr in human format (JSON output carries them in the result)."""
    if warnings and args.format != "json":
        print(render_all(warnings), file=sys.stderr)


def _emit(args, data, text: str) -> None:
    if args.quiet:
        return
    if args.format == "json":
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        print(text)
