"""The contract_substitutions action: apply a cuda_component's substitutions to its contract.

    python substitute_contract.py LABEL CONTRACT OUT SUBSTITUTIONS.json

Like expand_template, but a key that occurs nowhere in the contract is an error (B-SUBST):
the variant it was meant to make would silently be the original. Standard library only.
"""

import json
import sys


def main(label: str, contract: str, out: str, subs_json: str) -> int:
    with open(contract, encoding="utf-8") as f:
        text = f.read()
    with open(subs_json, encoding="utf-8") as f:
        subs = json.load(f)
    missing = [k for k in subs if k not in text]
    if missing:
        print(f"pipelink B-SUBST: {label}: attribute contract_substitutions: key {missing[0]!r} occurs nowhere in "
              f"{contract}, so the substitution would change nothing. hint: use a marker that occurs in the contract "
              f"(copy it from the file, line breaks and spacing included)", file=sys.stderr)
        return 1
    for k, v in subs.items():
        text = text.replace(k, v)
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
