"""Command-line usage errors as E-USAGE diagnostics, each with a hint that says what to type.

argparse reports every usage error through ArgumentParser.error (cli._Parser turns it into
E-USAGE, exit 2); this module words the hint and finds the output format the user asked for,
which the error must be rendered in although parsing failed.
"""

from __future__ import annotations

from pipelink.common.diagnostics import Diagnostic


def requested_format(argv: list[str]) -> str:
    """"json" if argv asks for it in any spelling argparse accepts (`--format=json`,
    `--format json`, an abbreviation such as `--form=json`), else "human"."""
    fmt = "human"
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        name, eq, value = arg.partition("=")
        if len(name) < 4 or not "--format".startswith(name):  # "--f" .. "--format"; "--" is not one
            continue
        if not eq and (i + 1 >= len(argv) or argv[i + 1].startswith("-")):
            continue  # `--format` with no value is the usage error itself; an earlier choice stands
        value = value if eq else argv[i + 1]
        if value in ("json", "human"):  # the last valid one wins, as in argparse; an invalid one (the usage
            fmt = value                 # error itself) does not undo an earlier --format=json
    return fmt


def usage_diagnostic(prog: str, message: str) -> Diagnostic:
    """E-USAGE for argparse's `message` about the command `prog` ("pipelink" or "pipelink pack")."""
    hint = f"see `{prog} --help`"
    if "argument cmd" in message or "arguments are required: cmd" in message:
        hint = ("give a command first, with no `--` before it: pipelink [--format=json] [--quiet] COMMAND ...; "
                "`pipelink --help` lists the commands, `pipelink COMMAND --help` a command's options")
    elif "unrecognized arguments" in message:
        hint = f"remove them, or check their spelling in `{prog} --help`"
    return Diagnostic("E-USAGE", message, hint=hint)
