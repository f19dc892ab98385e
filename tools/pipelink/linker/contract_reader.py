"""Reading contract TOML: line numbers for every key, and typed, bounded access to its values.

Every misuse raises a coded diagnostic (C-SYNTAX, C-SCHEMA, C-EXPR) citing file:line, so the
clause parsers (contract_clauses.py) and the kernel-file reader (compose.py) never see a raw
TOML value they have not checked.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pipelink.common.diagnostics import Fact, reject
from pipelink.common.expr import ExprError, constant_value, names_in
from pipelink.common.files import read_text
from pipelink.linker.contract_types import IDENT, U32_MAX, Origin


class LineIndex:
    """Maps a TOML path ("ring.ab.depth") to the line it was written on."""

    # Linear: the name is stripped after matching. `\s*([^\]]+?)\s*\]` backtracked cubically on a line
    # of `[` and spaces with no `]` (in a multi-line string or array): a 2,000-space line took 20 s.
    _header = re.compile(r"^\s*\[\[?([^\]]*)\]")
    _key = re.compile(r'^\s*("?[A-Za-z0-9_.-]+"?)\s*=')

    def __init__(self, text: str):
        self.lines: dict[str, int] = {}
        self.occurrences: dict[str, list[int]] = {}  # every line of an array-of-tables header
        table = ""
        for no, line in enumerate(text.splitlines(), 1):
            if (m := self._header.match(line)) and m.group(1).strip():
                table = m.group(1).strip().replace('"', "").replace(" ", "")
                parts = table.split(".")
                for n in range(1, len(parts) + 1):  # [callable.export.f] also places "callable"
                    self.lines.setdefault(".".join(parts[:n]), no)
                self.occurrences.setdefault(table, []).append(no)
            elif m := self._key.match(line):
                key = m.group(1).strip('"')
                self.lines.setdefault(f"{table}.{key}" if table else key, no)

    def line(self, path: str) -> int:
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path.rpartition(".")[0]
        return 0


class Reader:
    """Typed access to one TOML table, raising C-SCHEMA with file:line on misuse."""

    def __init__(self, data: dict, path: str, lines: LineIndex, file: str):
        self.data, self.path, self.lines, self.file = data, path, lines, file
        self.used: set[str] = set()

    def origin(self, key: str = "") -> Origin:
        p = f"{self.path}.{key}" if self.path and key else (key or self.path)
        return Origin(self.file, self.lines.line(p))

    def fail(self, key: str, message: str, hint: str = ""):
        where = f"{self.path}.{key}" if self.path else key
        raise reject(
            "C-SCHEMA",
            f"{where}: {message}",
            clause=where,
            facts=[Fact(f"contract {Path(self.file).name}", message, str(self.origin(key)))],
            hint=hint or "see docs/CONTRACTS.md for the contract format",
        )

    def get(self, key: str, types, default=..., *, what: str = ""):
        self.used.add(key)
        if key not in self.data:
            if default is ...:
                self.fail(key, "is required", hint=f"add `{key} = ...` to [{self.path}]" if self.path else "")
            return default
        v = self.data[key]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in _as_tuple(types)):
            self.fail(key, f"must be {what or _type_name(types)}, not {type(v).__name__} {v!r}")
        return v

    def table(self, key: str) -> "Reader":
        v = self.get(key, dict, {})
        return Reader(v, f"{self.path}.{key}" if self.path else key, self.lines, self.file)

    def finish(self):
        extra = sorted(set(self.data) - self.used)
        if extra:
            self.fail(extra[0], "is not a known field", hint="check the spelling against docs/CONTRACTS.md")


def _as_tuple(t):
    return t if isinstance(t, tuple) else (t,)


def _type_name(types) -> str:
    return " or ".join(t.__name__.replace("str", "string").replace("int", "integer") for t in _as_tuple(types))


def load_toml(path: str | Path) -> tuple[dict, LineIndex, str]:
    text = read_text(path, "input file")
    return parse_toml_text(text, str(path)), LineIndex(text), text


def parse_toml_text(text: str, file: str) -> dict:
    try:
        return tomllib.loads(text)
    except (RecursionError, MemoryError):  # tomllib recurses per nesting level: `a = [[[[...` is too deep
        raise reject("C-SYNTAX", f"{file}: arrays or tables nested too deeply",
                     facts=[Fact(f"file {Path(file).name}", "nesting deeper than the parser allows", str(Origin(file, 1)))],
                     hint="contracts and kernel files need a few levels of nesting at most") from None
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"at line (\d+)", str(e))
        # "at end of document" (an unclosed array or string) has no line: the last line is where it ends.
        line = int(m.group(1)) if m else max(1, len(text.splitlines()))
        raise reject(
            "C-SYNTAX",
            f"{file}:{line}: {e}",
            facts=[Fact(f"file {Path(file).name}", str(e), str(Origin(file, line)))],
            hint="fix the TOML syntax (strings need quotes, tables [name] on their own line)",
        ) from None


def read_ident(r: Reader, key: str, value: str) -> str:
    if not IDENT.match(value):
        r.fail(key, f"{value!r} is not a C identifier")
    return value


def read_align(r: Reader, default: int) -> int:
    align = r.get("align", int, default)
    if align <= 0 or align & (align - 1) or align > 1024:
        r.fail("align", f"must be a power of two up to 1024, not {align}")
    return align


def read_u32(r: Reader, key: str, v: int, lo: int = 0, hi: int = U32_MAX) -> int:
    """Every number a contract states ends up in a u32 (or a narrower hardware field)."""
    if not lo <= v <= hi:
        r.fail(key, f"must be in {lo}..{hi}, not {v}")
    return v


def read_expr(r: Reader, key: str, default=..., *, facts: set[str] | None = None, hi: int = U32_MAX) -> str | int:
    v = r.get(key, (str, int), default, what="an integer or an arithmetic expression")
    if v is None:  # an optional key left out
        return None
    if isinstance(v, str):
        try:
            const = constant_value(v)
        except ExprError:
            const = None  # names_in below reports it with its own wording
        if const is not None and not 1 <= const <= hi:
            # A constant expression is held to the bounds of the integer it stands for.
            raise reject("C-EXPR", f"{r.path}.{key}: {v!r} is {const}; it must be in 1..{hi}", clause=f"{r.path}.{key}",
                         facts=[Fact(f"contract {Path(r.file).name}", f"{key} = {v!r} = {const}", str(r.origin(key)))],
                         hint=f"a constant {key} is held to the same bounds as an integer (docs/CONTRACTS.md, "
                              "Limits on values)")
        try:
            names = names_in(v)
        except ExprError as e:
            raise reject("C-EXPR", f"{r.path}.{key}: {e}", clause=f"{r.path}.{key}",
                         facts=[Fact(f"contract {Path(r.file).name}", f"{key} = {v!r}", str(r.origin(key)))],
                         hint="use integers, fact names, + - * // % ( ) and min/max/ceil_div") from None
        unknown = sorted(names - facts) if facts is not None else []
        if unknown:
            # A name the contract does not declare would be read from whichever component owns
            # it, skipping this component's accept check: a typo or a missing [fact.X].
            raise reject("C-EXPR", f"{r.path}.{key}: {v!r} uses {', '.join(unknown)}, which this contract does not declare",
                         clause=f"{r.path}.{key}",
                         facts=[Fact(f"contract {Path(r.file).name}", f"{key} = {v!r}", str(r.origin(key)))],
                         hint=f"declare [fact.{unknown[0]}] (with accept = ... for the values this component supports), "
                              f"or fix the name; declared facts: {', '.join(sorted(facts)) or 'none'}")
    else:
        read_u32(r, key, v, 1, hi)
    return v



def read_shape_entry(r: Reader, x, facts: set[str]) -> None:
    """One tensor extent: checked like any other expression (a list entry has no key of its own)."""
    sub = Reader({"shape": x}, r.path, r.lines, r.file)
    read_expr(sub, "shape", facts=facts)

