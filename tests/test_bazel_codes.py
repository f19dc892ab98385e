"""The Bazel rules' B-* codes stay in one table, documented and tested (no Bazel needed).

pipelink_rules/private/errors.bzl holds B_CODES; every code must have a row in
docs/CONTRACTS.md ("Bazel rule codes") and a failure test in tests/rules/failure_tests.bzl
(B-MODULE fails while evaluating the module extension, which analysis tests cannot reach: it is
tested in tests/test_bazel_consumer.py), and
no rule may fail without a code.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "pipelink_rules"


def _codes() -> list[str]:
    text = (RULES / "private" / "errors.bzl").read_text()
    table = text[text.index("B_CODES = {"):text.index("}", text.index("B_CODES = {"))]
    return re.findall(r'"(B-[A-Z-]+)":', table)


def test_every_code_is_documented():
    docs = (REPO / "docs" / "CONTRACTS.md").read_text()
    section = docs[docs.index("### Bazel rule codes (B-*)"):]
    missing = [c for c in _codes() if f"| {c} |" not in section]
    assert not missing, f"B-* codes without a row in docs/CONTRACTS.md: {missing}"
    documented = set(re.findall(r"^\| (B-[A-Z-]+) \|", section, re.M))
    assert documented == set(_codes()), documented ^ set(_codes())


def test_every_code_has_a_failure_test():
    cases = (REPO / "tests" / "rules" / "failure_tests.bzl").read_text()
    tested = set(re.findall(r'^\s*\("[^"]+", "(B-[A-Z-]+)",', cases, re.M))
    assert set(_codes()) - tested == {"B-MODULE"}, set(_codes()) - tested  # B-MODULE: test_bazel_consumer.py
    assert tested <= set(_codes()), tested - set(_codes())


def test_no_uncoded_fail():
    bare = []
    for f in [*RULES.rglob("*.bzl"), *(REPO / "kernels").rglob("*.bzl")]:  # the rules and the kernel macros
        if f.name == "errors.bzl":
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if re.search(r"(?<![\w.])fail\(", line):
                bare.append(f"{f.relative_to(REPO)}:{n}: {line.strip()}")
    assert not bare, "use pl_fail (errors.bzl) with a code and hint:\n" + "\n".join(bare)
