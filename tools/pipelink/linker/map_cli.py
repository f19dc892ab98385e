"""The `map` and `diff-map` commands: read placements, render, write the page atomically.

Kept out of cli.py so the command table stays one registration and one call per command.
"""

from __future__ import annotations

from pipelink.common.diagnostics import Diagnostic, Rejected


def add_map_commands(sub) -> None:
    mp = sub.add_parser("map", help="draw a linked kernel's placement (from `link --placement`) as HTML")
    mp.add_argument("placement", help="the <kernel>.placement.json `pipelink link --placement` wrote")
    mp.add_argument("--html", required=True, metavar="OUT", help="write the self-contained HTML page here")

    dm = sub.add_parser("diff-map", help="what moved between two links of a kernel (their placements)")
    dm.add_argument("a", help="the earlier placement.json")
    dm.add_argument("b", help="the later placement.json")
    dm.add_argument("--html", metavar="OUT", help="also write the comparison as an HTML page")


def run_map_command(args, origins, emit) -> int:
    """`emit(args, data, text)` prints the result (cli._emit). Returns the exit status."""
    from pipelink.linker.outputs import check_targets, write_all
    from pipelink.linker.placement import read_placement

    inputs = [args.placement] if args.cmd == "map" else [args.a, args.b]
    origins.resolve(inputs)
    if args.html is not None:
        if args.html == "":
            raise Rejected(Diagnostic("E-OUTPUT", "--html is an empty path", hint="give a path, or leave the option out"))
        check_targets([("--html", args.html)], inputs)  # before reading: a bad OUT costs nothing
    if args.cmd == "map":
        from pipelink.linker.map_html import render_map

        placement = read_placement(args.placement)
        write_all([(args.html, render_map(placement).encode())], flags=["--html"], inputs=inputs)
        emit(args, {"ok": True, "html": args.html, "kernel": placement["kernel"]},
             f"map of {placement['kernel']} -> {args.html}")
        return 0
    from pipelink.linker.map_diff import diff, diff_text, render_diff

    a, b = read_placement(args.a), read_placement(args.b)
    changes = diff(a, b)
    names = (args.a, args.b)
    if args.html is not None:
        write_all([(args.html, render_diff(a, b, changes, names).encode())], flags=["--html"], inputs=inputs)
    emit(args, {"ok": True, "kernels": [a["kernel"], b["kernel"]], "same_kernel": a["kernel"] == b["kernel"],
                "changes": [c.to_json() for c in changes], **({"html": args.html} if args.html else {})},
         diff_text(a, b, changes, names))
    return 0
