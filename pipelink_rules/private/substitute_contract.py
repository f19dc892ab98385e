"""The packed-contract action: apply a cuda_component's contract_substitutions and `facts`.

    python substitute_contract.py LABEL CONTRACT OUT SUBSTITUTIONS.json [FACTS.json]

FACTS.json maps a fact name to "MACRO=VALUE" (the rule passes -DMACRO=VALUE to the sources):
the `own` value of the contract's [fact.<name>] table becomes VALUE, on its own line, so the
value is written once, in the BUILD file. A fact whose table is missing or has no `own` (the
component reads it, another owns it) is B-FACT: the define would reach the source while the
contract kept its old value.

Like expand_template, but a key that occurs nowhere in the contract is an error (B-SUBST):
the variant it was meant to make would silently be the original. The keys are replaced in
one pass over the original text, longest key first where two start at one place, so a value
is never substituted again ({"@A@": "@B@", "@B@": "1"} gives "@B@" for "@A@", whatever the
order), and a key counts as occurring only where that pass replaces it. A contract that is not
a readable UTF-8 file (a directory, binary data) is B-FILE-TYPE. Every failure is one coded
line on stderr and leaves no output. Standard library only.
"""

import json
import re
import sys
import tomllib

_HINT_KEY = ("use a marker that occurs in the contract (copy it from the file, line breaks and spacing included), "
             "and no key inside another key's occurrence")


def _bazel_text(s: str) -> str:
    """A string as the BUILD file spelled it. Bazel 7 reads BUILD files as Latin-1 and
    ctx.actions.write encodes that as UTF-8, so a BUILD file's "é" (UTF-8 c3 a9) arrives here as
    "Ã©"; undo that when it is exactly such a double encoding (else the key never matched the
    contract, and a value was written into it garbled)."""
    try:
        return s.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return s


def _fail(code: str, label: str, message: str, hint: str) -> int:
    print(f"pipelink {code}: {label}: {message}. hint: {hint}", file=sys.stderr)
    return 1


# Linear patterns: a line of `[` and blanks with no `]` (TOML allows one inside a multi-line
# string) made the lazy, blank-flanked forms backtrack cubically.
_TABLE = re.compile(r"\s*\[([^\[\]]*)\]\s*(#.*)?")
_OWN = re.compile(r"\s*own\s*=\s*")
_HINT_FACT = ("list in `facts` only the facts whose [fact.<name>] table has an `own` value (the facts this component "
              "owns); a fact it reads comes from its owner")


def _set_owned(text: str, fact: str, value: str) -> str | None:
    """`text` with [fact.<fact>]'s `own` value replaced by `value`; None if it has none."""
    lines = text.splitlines(keepends=True)
    table = None
    for i, line in enumerate(lines):
        body = line.rstrip("\r\n")
        header = _TABLE.fullmatch(body)
        if header:
            table = header.group(1).strip()
            continue
        own = _OWN.match(body) if table == f"fact.{fact}" else None
        if own:  # the value, then its trailing blanks and comment as they were
            rest = body[own.end():]
            old = rest.split("#", 1)[0].rstrip()
            lines[i] = body[:own.end()] + value + rest[len(old):] + line[len(body):]
            return "".join(lines)
    return None


def _owned_value(text: str, fact: str):
    """The `own` value of [fact.<fact>] as TOML reads it (None: no such value, or not TOML)."""
    try:
        return tomllib.loads(text).get("fact", {}).get(fact, {}).get("own")
    except tomllib.TOMLDecodeError:
        return None


def _apply_facts(label: str, contract: str, text: str, facts: dict) -> tuple[str | None, int]:
    for fact, given in facts.items():
        value = given.partition("=")[2]
        if isinstance(_owned_value(text, fact), bool):  # a bool fact's -D value is 0 or 1, its own value false or true
            if value not in ("0", "1"):
                return None, _fail("B-FACT", label, f"attribute facts: {contract}'s fact {fact!r} is a bool, so "
                                                    f"-D{given} must set 0 or 1", "give a bool fact 0 or 1")
            value, expected = ("true", True) if value == "1" else ("false", False)
        else:
            expected = int(value) if re.fullmatch(r"-?[0-9]+", value) else value
        new = _set_owned(text, fact, value)
        owned = _owned_value(new, fact) if new is not None else None
        if new is None or owned != expected or type(owned) is not type(expected):
            return None, _fail("B-FACT", label, f"attribute facts: {contract} owns no fact {fact!r} (no `own = ...` line "
                                                f"in a [fact.{fact}] table), so -D{given} would disagree with it",
                               _HINT_FACT)
        text = new
    return text, 0


def main(label: str, contract: str, out: str, subs_json: str, facts_json: str | None = None) -> int:
    try:
        with open(contract, "rb") as f:
            raw = f.read()
    except OSError as e:
        return _fail("B-FILE-TYPE", label, f"attribute contract: {contract} cannot be read ({e.strerror or e})",
                     "name the component's <component>.contract.toml file (not a directory)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        return _fail("B-FILE-TYPE", label, f"attribute contract: {contract} is not UTF-8 text (byte {e.start}, line {line})",
                     "save the contract as UTF-8 (contracts are TOML, which is UTF-8)")
    with open(subs_json, encoding="utf-8") as f:
        subs = {_bazel_text(k): _bazel_text(v) for k, v in json.load(f).items()}
    keys = sorted(subs, key=lambda k: (-len(k), k))
    counts = dict.fromkeys(keys, 0)

    def replace(m: "re.Match[str]") -> str:
        counts[m.group(0)] += 1
        return subs[m.group(0)]

    if keys:
        text = re.sub("|".join(re.escape(k) for k in keys), replace, text)
    missing = [k for k in subs if not counts[k]]
    if missing:
        k = missing[0]
        where = "occurs nowhere in" if k not in raw.decode("utf-8") else "occurs only inside another key's occurrence in"
        return _fail("B-SUBST", label, f"attribute contract_substitutions: key {k!r} {where} {contract}, so the "
                                       f"substitution would change nothing", _HINT_KEY)
    if facts_json:
        with open(facts_json, encoding="utf-8") as f:
            text, rc = _apply_facts(label, contract, text, json.load(f))
        if rc:
            return rc
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
