"""`pipelink explain CODE` in long form (explain.py, pipelink/explanations/*.toml): every code
the linker, the runtime or the Bazel rules can raise, and every code docs/CONTRACTS.md lists, has
a long form, and each long form's example really triggers its code through the real passes
(parse -> pack -> compose -> check -> solve, or the CLI / a Python snippet)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from conftest import gpu_unavailable_reason
from pipelink.linker import cli
from pipelink.linker.compose import parse_kernel
from pipelink.linker.contract import parse_contract_text
from pipelink.common.diagnostics import CODES, Rejected, rule_codes
from pipelink.linker.explain import TRIGGERS, load_catalogue
from pipelink.linker.limits import check_limits
from pipelink.linker.package import pack

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "CONTRACTS.md").read_text()
CATALOGUE = load_catalogue()
# Codes whose example the CPU test cannot run, and why (the report of issue 44 lists them too).
NOT_RUN = {
    "E-INTERNAL": "a pipelink bug: no input is meant to cause it",
    "L-SOLVE": "the solver giving up needs a placement problem too large to state as a small example",
    "L-LINK": "nvJitLink refusing inputs pack accepted has no small example (test_hardening.py runs a crashing one)",
    "L-COMPILE": "the generated code failing to compile means a pipelink bug or a foreign header",
    "R-CUDA": "a failing CUDA driver call needs a GPU",
    "R-GRID": "the co-resident bound is read from the device: needs a GPU",
    "R-WORKSPACE": "a lent workspace is checked against a loaded kernel: needs a GPU",
}
# Codes whose snippet needs a GPU (CUDA tensors): run where there is one.
NEEDS_GPU = {"R-SHAPE", "R-DTYPE", "R-LAYOUT"}


def documented_codes() -> set[str]:
    rows = re.findall(r"^\| ([A-Z]-[A-Z0-9 ,R-]+?) \|", DOC, re.M)
    return {c.strip() for row in rows for c in row.split(",") if re.fullmatch(r"[A-Z]-[A-Z0-9-]+", c.strip())}


def raised_codes() -> set[str]:
    pattern = re.compile(r"[\"']([CPLERB]-[A-Z0-9][A-Z0-9-]*)[\"']")
    used = set()
    for folder in ("tools/pipelink", "kernels", "pipelink_rules", "examples"):
        for f in sorted((ROOT / folder).rglob("*")):
            if f.suffix in (".py", ".bzl") and "__pycache__" not in f.parts:
                used |= set(pattern.findall(f.read_text()))
    return used


def test_every_code_has_a_long_form():
    known = {**CODES, **rule_codes()}
    wanted = set(known) | documented_codes() | raised_codes()
    assert len(wanted) > 80 and "P-LIMIT" in wanted and "B-COPT" in wanted
    missing = sorted(wanted - set(CATALOGUE))
    assert not missing, f"codes without a long form in pipelink/explanations: {missing}"
    assert not set(CATALOGUE) - set(known), "a long form of a code pipelink does not know"
    for e in CATALOGUE.values():
        assert e.trigger in TRIGGERS and e.means.strip() and e.fix.strip(), e.code
        assert e.files or e.argv or e.python or e.note or e.trigger == "bazel", e.code


def _slug(heading: str) -> str:
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")  # GitHub's anchors


def test_docs_sections_exist():
    anchors = {_slug(h) for h in re.findall(r"^#+ (.*)$", DOC, re.M)}
    for e in CATALOGUE.values():
        path, _, anchor = e.docs.partition("#")
        assert path == "docs/CONTRACTS.md" and anchor in anchors, (e.code, e.docs)


def test_cli_prints_the_long_form(capsys):
    assert cli.main(["explain", "L-RING-DEPTH"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("L-RING-DEPTH: producer and consumer depth ranges do not intersect")
    for part in ("What it means", "Example that triggers it", "depth = [2, 3]", "Fix", "Docs: docs/CONTRACTS.md#"):
        assert part in out
    assert cli.main(["--format=json", "explain", "L-RING-DEPTH"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["L-RING-DEPTH"] == CODES["L-RING-DEPTH"] and d["explanation"]["trigger"] == "kernel"
    assert cli.main(["--format=json", "explain"]) == 0 and "P-LIMIT" in json.loads(capsys.readouterr().out)


def _write(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    out = {}
    for name, text in files.items():
        p = tmp_path / name
        p.write_text(text.lstrip("\n"))
        out[name] = p
    return out


def _codes_of(fn) -> list[str]:
    try:
        fn()
    except Rejected as e:
        return e.codes
    return []


def _run_contract(e, files, **_):
    def go():
        for name, p in files.items():
            if name.endswith(".contract.toml"):
                check_limits(parse_contract_text(p.read_text(), str(p)))
    return _codes_of(go)


def _run_pack(e, files, lto, tmp_path, **_):
    (contract,) = [p for n, p in files.items() if n.endswith(".contract.toml")]
    (src,) = [p for n, p in files.items() if n.endswith(".cu")]
    obj = lto(src, arch=e.compile_arch or "sm_90a")
    if e.copts:  # the object is built without them: the carried copts do not rebuild it
        return _codes_of(lambda: pack(str(contract), [str(obj)], sources=[str(src)], copts=list(e.copts)))
    return _codes_of(lambda: pack(str(contract), [str(obj)]))


def _run_kernel(e, files, packer, toy, **_):
    def go():
        packages = [packer.variant(toy.producer, p.read_text(), check_object=False)
                    for n, p in files.items() if n.endswith(".contract.toml")]
        (kernel,) = [p for n, p in files.items() if n.endswith(".kernel.toml")]
        from pipelink.linker.link import plan

        plan(parse_kernel(str(kernel), packages))
    return _codes_of(go)


def _run_link(e, files, lto, **_):
    from pipelink.linker.link import link

    def go():
        packages = [pack(str(p), [str(lto(files[n.replace(".contract.toml", ".cu")]))])
                    for n, p in files.items() if n.endswith(".contract.toml")]
        (kernel,) = [p for n, p in files.items() if n.endswith(".kernel.toml")]
        res = link(parse_kernel(str(kernel), packages), control=True)
        if res.control_error is not None:  # the CLI raises it after writing the linked outputs
            raise res.control_error
    return _codes_of(go)


def _run_command(e, files, tmp_path, capsys, **_):
    capsys.readouterr()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        rc = cli.main(["--format=json", *e.argv])
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    return [d["code"] for d in json.loads(out)["diagnostics"]] if rc else []


def _run_python(e, files, tmp_path, monkeypatch, **_):
    monkeypatch.chdir(tmp_path)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", tempfile.tempdir)  # the snippet may reset it
    monkeypatch.setenv("TMPDIR", os.environ.get("TMPDIR", "/tmp"))
    return _codes_of(lambda: exec(compile(e.python, f"<{e.code} example>", "exec"), {"__name__": "example"}))


RUNNERS = {"contract": _run_contract, "pack": _run_pack, "kernel": _run_kernel, "link": _run_link, "command": _run_command,
           "python": _run_python}


@pytest.mark.parametrize("code", sorted(c for c, e in CATALOGUE.items() if e.trigger != "bazel"))
def test_example_triggers_its_code(code, tmp_path, request, capsys, monkeypatch):
    e = CATALOGUE[code]
    if code in NOT_RUN:
        pytest.skip(NOT_RUN[code])
    if code in NEEDS_GPU and (why := gpu_unavailable_reason()):
        pytest.skip(f"the snippet makes CUDA tensors: {why}")
    files = _write(tmp_path, e.files)
    fixtures = {"tmp_path": tmp_path, "capsys": capsys, "monkeypatch": monkeypatch}
    if e.trigger in ("pack", "link"):
        fixtures["lto"] = request.getfixturevalue("lto")
    if e.trigger == "kernel":
        fixtures["packer"], fixtures["toy"] = request.getfixturevalue("packer"), request.getfixturevalue("toy")
    codes = RUNNERS[e.trigger](e, files, **fixtures)
    assert code in codes, f"{code}'s example raised {codes or 'nothing'}"


def test_rule_codes_are_run_by_the_rules_failure_tests():
    """The B-* examples are BUILD snippets; tests/rules/failure_tests.bzl (a Bazel test, not run
    here) has a failure test asserting each code; tests/e2e/test_bazel_codes.py and test_bazel_consumer.py
    (Bazel runs, not CPU-quick) the execution-time and module-extension ones (B-COMPILE, B-MODULE)."""
    failure_tests = "".join((ROOT / "tests" / f).read_text()
                            for f in ("rules/failure_tests.bzl", "e2e/test_bazel_consumer.py", "e2e/test_bazel_codes.py"))
    for code, e in CATALOGUE.items():
        if code.startswith("B-"):
            assert e.trigger == "bazel" and e.files, code
            assert code in failure_tests, f"no failure test asserts {code}"


def test_long_forms_ship_with_the_package():
    """The catalogue is package data: the wheel (pyproject) and the Bazel targets carry it."""
    assert '"explanations/*.toml"' in (ROOT / "pyproject.toml").read_text()
    build = (ROOT / "tools" / "BUILD.bazel").read_text()
    assert build.count('"pipelink/explanations/*.toml"') == 2  # pipelink_lib's data, pipelink_linker_files
