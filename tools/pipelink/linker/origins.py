"""`--origin PATH=LABEL`: which owner (e.g. a Bazel target) a file belongs to, in diagnostics.

Both sides may hold `=`: a path `out/a=b/loader.contract.toml`, a Bazel label `//pkg:x=y`. So
a value is not split at its first `=` (that read `a` as the path and `b/...=//pkg:x=y` as the
label). PATH must be a file the command reads or cites: one of its input paths, or for link and
plan a contract path recorded in one of its packages. The value is split at the one `=` whose
left side is such a path. Refused with E-ORIGIN, before any work: a value without `=`, with an
empty LABEL or a control character in it (a newline would forge a line of the diagnostics), one
that no split makes name such a file, one that two splits do (ambiguous), and two values giving
one path different labels.
"""

from __future__ import annotations

import dataclasses

from pipelink.common.diagnostics import Diagnostic, Fact, reject
from pipelink.common.files import control_chars

_FORM_HINT = "write --origin PATH=LABEL, PATH being a file this command reads (e.g. its --contract or --kernel)"


def _splits(value: str) -> list[tuple[str, str]]:
    """Every (PATH, LABEL) that cutting `value` at one of its `=` gives, shortest PATH first."""
    return [(value[:i], value[i + 1:]) for i, c in enumerate(value) if c == "="]


def check_origin_form(values: list[str]) -> None:
    """What can be refused without knowing the command's files (at once, before any input is read)."""
    for v in values:
        if "=" not in v:
            raise reject("E-ORIGIN", f"--origin {v!r} has no '=' between PATH and LABEL",
                         facts=[Fact("--origin", repr(v))], hint=_FORM_HINT)
        if v.endswith("="):
            raise reject("E-ORIGIN", f"--origin {v!r} gives no LABEL after its last '='",
                         facts=[Fact("--origin", repr(v))], hint=_FORM_HINT)


def resolve_origins(values: list[str], known_paths, *, strict: bool = True) -> list[tuple[str, str]]:
    """(PATH, LABEL) for each value, PATH one of `known_paths`. strict=False (a command that
    failed before it knew all its files) drops the values it cannot split instead of refusing."""
    known = {str(p) for p in known_paths if p}
    table: dict[str, str] = {}
    for v in values:
        found = [(p, label) for p, label in _splits(v) if p in known and label]
        if len(found) != 1:
            if not strict:
                continue
            if not found:
                raise reject("E-ORIGIN", f"--origin {v!r}: no '=' in it follows a file this command reads",
                             facts=[Fact("--origin", repr(v))] + [Fact("file the command reads", p) for p in sorted(known)[:8]],
                             hint="PATH must be spelled as the command was given it (or as pack recorded a contract)")
            raise reject("E-ORIGIN", f"--origin {v!r} is ambiguous: " +
                         " or ".join(f"PATH {p!r} with LABEL {label!r}" for p, label in found),
                         facts=[Fact("--origin", repr(v))] + [Fact("file the command reads", p) for p, _ in found],
                         hint="a path and a label that both hold '=' cannot be told apart here: rename the file "
                              "(or the target) so that only one reading names a file")
        path, label = found[0]
        bad = control_chars(label)
        if bad:
            if not strict:
                continue
            raise reject("E-ORIGIN", f"--origin {v!r}: LABEL holds control characters ({', '.join(bad)})",
                         facts=[Fact("--origin", repr(v))], hint="give a label on one line, without control characters")
        if table.get(path, label) != label:
            if not strict:
                continue
            raise reject("E-ORIGIN", f"--origin gives {path!r} two labels, {table[path]!r} and {label!r}",
                         facts=[Fact("--origin", f"{path}={table[path]}"), Fact("--origin", f"{path}={label}")],
                         hint="give each file one --origin")
        table[path] = label
    return list(table.items())


def annotate(diags: list[Diagnostic], table: list[tuple[str, str]]) -> list[Diagnostic]:
    """Append the owner to every fact whose origin is one of the table's files (`path` or `path:line`)."""
    if not table:
        return diags
    out = []
    for d in diags:
        facts = []
        for f in d.facts:
            origin = f.origin
            for path, label in table:
                if origin == path or origin.startswith(path + ":"):
                    origin = f"{origin} [{label}]"
                    break
            facts.append(dataclasses.replace(f, origin=origin))
        out.append(dataclasses.replace(d, facts=tuple(facts)))
    return out
